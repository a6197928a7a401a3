// File: tests/operator/lending/lending_window_test.cpp
// Cron expressions (fields, ranges, steps, names, cron's day-of-month OR day-of-week rule, the
// @ macros, messages for bad ones) and lending windows: open across midnight, weekday-only
// windows over a weekend, time zones with DST, several windows, and when a window closes or
// opens next.
#include <gtest/gtest.h>

#include <filesystem>

#include "operator/lending/lending_window.h"

namespace qsync::lending {
namespace {

int64_t utc(int64_t y, int mo, int d, int h, int mi) { return seconds_from_civil({y, mo, d, h, mi, 0}); }

TEST(CronTest, ParsesFieldsRangesStepsAndNames) {
  const CronSchedule c = parse_cron("*/15 9-17 * JAN-MAR mon-fri");
  EXPECT_TRUE(c.minutes.test(0) && c.minutes.test(45) && !c.minutes.test(10));
  EXPECT_TRUE(c.hours.test(9) && c.hours.test(17) && !c.hours.test(18));
  EXPECT_TRUE(c.months.test(1) && c.months.test(3) && !c.months.test(4));
  EXPECT_TRUE(c.days_of_week.test(1) && c.days_of_week.test(5) && !c.days_of_week.test(0));
  EXPECT_TRUE(parse_cron("0 0 * * 7").days_of_week.test(0));  // 7 is Sunday
  EXPECT_TRUE(parse_cron("5/20 * * * *").minutes.test(45));
  EXPECT_EQ(parse_cron("@daily").minutes.count(), 1u);
}

TEST(CronTest, EitherDayFieldMatchesWhenBothAreRestricted) {
  const CronSchedule c = parse_cron("0 0 1 * 1");  // the 1st, or any Monday
  CivilTime first = civil_from_seconds(utc(2026, 5, 1, 0, 0));   // a Friday
  CivilTime monday = civil_from_seconds(utc(2026, 5, 4, 0, 0));
  CivilTime tuesday = civil_from_seconds(utc(2026, 5, 5, 0, 0));
  EXPECT_TRUE(c.matches(first));
  EXPECT_TRUE(c.matches(monday));
  EXPECT_FALSE(c.matches(tuesday));
}

TEST(CronTest, BadExpressionsNameTheFieldAndTheForms) {
  for (const char* bad : {"0 0 * *", "61 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8", "*/0 * * * *",
                          "x * * * *", "5-1 * * * *"}) {
    try {
      parse_cron(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("*/S"), std::string::npos) << e.what();
    }
  }
}

TEST(CronTest, LatestAndNextMatches) {
  const CronSchedule c = parse_cron("30 20 * * *");
  const TimeZone tz;
  EXPECT_EQ(cron_latest_at_or_before(c, tz, utc(2026, 6, 10, 21, 0)), utc(2026, 6, 10, 20, 30));
  EXPECT_EQ(cron_latest_at_or_before(c, tz, utc(2026, 6, 10, 20, 30)), utc(2026, 6, 10, 20, 30));
  EXPECT_EQ(cron_latest_at_or_before(c, tz, utc(2026, 6, 10, 20, 29)), utc(2026, 6, 9, 20, 30));
  EXPECT_EQ(cron_next_after(c, tz, utc(2026, 6, 10, 20, 30)), utc(2026, 6, 11, 20, 30));
  EXPECT_EQ(cron_latest_at_or_before(parse_cron("0 0 29 2 *"), tz, utc(2026, 6, 1, 0, 0), 30), -1);
}

TEST(LendingWindowTest, NightWindowAcrossMidnight) {
  const std::vector<LendingWindow> w = {lending_window("0 20 * * *", "0 7 * * *", "UTC")};
  EXPECT_FALSE(window_state(w, utc(2026, 6, 10, 19, 59)).open);
  EXPECT_EQ(window_state(w, utc(2026, 6, 10, 19, 0)).opens_at, utc(2026, 6, 10, 20, 0));
  const WindowState night = window_state(w, utc(2026, 6, 11, 3, 0));
  EXPECT_TRUE(night.open);
  EXPECT_EQ(night.closes_at, utc(2026, 6, 11, 7, 0));
  EXPECT_FALSE(window_state(w, utc(2026, 6, 11, 7, 0)).open);
}

TEST(LendingWindowTest, WeekdayNightsSkipTheWeekend) {
  // Mon-Fri evenings until the next morning; 2026-06-12 is a Friday.
  const std::vector<LendingWindow> w = {lending_window("0 20 * * 1-5", "0 7 * * 2-6", "UTC")};
  EXPECT_TRUE(window_state(w, utc(2026, 6, 13, 2, 0)).open);    // Friday night
  EXPECT_FALSE(window_state(w, utc(2026, 6, 13, 21, 0)).open);  // Saturday evening
  EXPECT_EQ(window_state(w, utc(2026, 6, 13, 21, 0)).opens_at, utc(2026, 6, 15, 20, 0));
}

TEST(LendingWindowTest, TimeZonesAndSeveralWindows) {
  if (!std::filesystem::exists("/usr/share/zoneinfo/America/New_York")) GTEST_SKIP() << "no tzdata";
  const LendingWindow ny = lending_window("0 20 * * *", "0 7 * * *", "America/New_York");
  // 20:00 EDT is 00:00Z in June, 20:00 EST is 01:00Z in December.
  EXPECT_TRUE(window_state({ny}, utc(2026, 6, 11, 0, 30)).open);
  EXPECT_FALSE(window_state({ny}, utc(2026, 12, 11, 0, 30)).open);
  EXPECT_TRUE(window_state({ny}, utc(2026, 12, 11, 1, 30)).open);
  const LendingWindow lunch = lending_window("0 12 * * *", "0 13 * * *", "UTC");
  const WindowState both = window_state({ny, lunch}, utc(2026, 6, 11, 12, 30));
  EXPECT_TRUE(both.open);
  EXPECT_EQ(both.window, 1u);
  EXPECT_EQ(both.closes_at, utc(2026, 6, 11, 13, 0));
  EXPECT_THROW(lending_window("0 20 * * *", "0 7 * * *", "Nowhere/Special"), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::lending
