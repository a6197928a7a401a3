// File: tests/operator/lending/time_zone_test.cpp
// Time zones from the system's tz database against the C library's localtime_r (the oracle:
// it reads the same files), DST gaps and overlaps, POSIX footer rules past the files'
// transition tables (north and south), civil-time arithmetic, and the errors for unknown
// names and bad files. Skipped where /usr/share/zoneinfo is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>

#include "operator/lending/time_zone.h"

namespace qsync::lending {
namespace {

bool have_tzdata() { return std::filesystem::exists("/usr/share/zoneinfo/America/New_York"); }

// The C library's UTC offset of `zone` at `utc`.
int64_t libc_offset(const std::string& zone, int64_t utc) {
  ::setenv("TZ", (":" + zone).c_str(), 1);
  ::tzset();
  std::time_t t = std::time_t(utc);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  return tm.tm_gmtoff;
}

TEST(TimeZoneTest, CivilArithmeticRoundTrips) {
  EXPECT_EQ(days_from_civil(1970, 1, 1), 0);
  EXPECT_EQ(days_from_civil(2000, 3, 1), 11017);
  EXPECT_EQ(civil_from_seconds(0).weekday, 4);  // a Thursday
  const CivilTime t = civil_from_seconds(1709876543);  // 2024-03-08T05:42:23Z, a Friday
  EXPECT_EQ(t.year, 2024);
  EXPECT_EQ(t.month, 3);
  EXPECT_EQ(t.day, 8);
  EXPECT_EQ(t.hour, 5);
  EXPECT_EQ(t.minute, 42);
  EXPECT_EQ(t.second, 23);
  EXPECT_EQ(t.weekday, 5);
  EXPECT_EQ(seconds_from_civil(t), 1709876543);
  EXPECT_EQ(civil_from_seconds(-1).year, 1969);
  EXPECT_EQ(days_in_month(2024, 2), 29);
  EXPECT_EQ(days_in_month(2100, 2), 28);
}

TEST(TimeZoneTest, UtcNeedsNoFile) {
  const TimeZone utc = TimeZone::load("UTC");
  EXPECT_EQ(utc.offset_at(1700000000), 0);
  EXPECT_EQ(TimeZone::load("").name(), "UTC");
}

TEST(TimeZoneTest, OffsetsAgreeWithTheCLibrary) {
  if (!have_tzdata()) GTEST_SKIP() << "no /usr/share/zoneinfo (install tzdata)";
  std::mt19937_64 rng(3);
  // 1990..2060: the transition tables and, past 2037 in slim files, the footer rules.
  std::uniform_int_distribution<int64_t> when(631152000, 2871763200);
  for (const char* zone : {"America/New_York", "Europe/Paris", "Australia/Sydney", "Asia/Kolkata", "America/Sao_Paulo"}) {
    const TimeZone tz = TimeZone::load(zone);
    for (int i = 0; i < 400; ++i) {
      const int64_t t = when(rng);
      ASSERT_EQ(tz.offset_at(t), libc_offset(zone, t)) << zone << " at " << t;
    }
  }
  ::unsetenv("TZ");
  ::tzset();
}

TEST(TimeZoneTest, DstGapAndOverlap) {
  if (!have_tzdata()) GTEST_SKIP() << "no /usr/share/zoneinfo (install tzdata)";
  const TimeZone ny = TimeZone::load("America/New_York");
  // 2026-03-08 02:00 EST clocks jump to 03:00 EDT; 02:30 does not exist: read as 03:30 EDT.
  const int64_t gap = ny.from_civil({2026, 3, 8, 2, 30, 0});
  EXPECT_EQ(gap, seconds_from_civil({2026, 3, 8, 7, 30, 0}));
  EXPECT_EQ(ny.to_civil(gap).hour, 3);
  // 2026-11-01 01:30 happens twice: the earlier (EDT, 05:30Z).
  EXPECT_EQ(ny.from_civil({2026, 11, 1, 1, 30, 0}), seconds_from_civil({2026, 11, 1, 5, 30, 0}));
  // An ordinary time round-trips.
  const CivilTime noon{2026, 7, 4, 12, 0, 0};
  EXPECT_EQ(ny.to_civil(ny.from_civil(noon)).hour, 12);
}

TEST(TimeZoneTest, PosixFooterRules) {
  const PosixTzRule us = parse_posix_tz("EST5EDT,M3.2.0,M11.1.0");
  EXPECT_EQ(us.std_offset, -5 * 3600);
  EXPECT_EQ(us.dst_offset, -4 * 3600);
  // 2050-07-01 is summer, 2050-01-15 winter.
  EXPECT_EQ(posix_tz_offset(us, seconds_from_civil({2050, 7, 1, 12, 0, 0})), -4 * 3600);
  EXPECT_EQ(posix_tz_offset(us, seconds_from_civil({2050, 1, 15, 12, 0, 0})), -5 * 3600);
  // Southern hemisphere: DST spans the new year.
  const PosixTzRule syd = parse_posix_tz("AEST-10AEDT,M10.1.0,M4.1.0/3");
  EXPECT_EQ(posix_tz_offset(syd, seconds_from_civil({2050, 1, 15, 0, 0, 0})), 11 * 3600);
  EXPECT_EQ(posix_tz_offset(syd, seconds_from_civil({2050, 7, 15, 0, 0, 0})), 10 * 3600);
  EXPECT_EQ(parse_posix_tz("<+0530>-5:30").std_offset, 5 * 3600 + 30 * 60);
  EXPECT_FALSE(parse_posix_tz("<+0530>-5:30").has_dst);
  EXPECT_THROW(parse_posix_tz("EST5EDT,M13.2.0,M11.1.0"), std::invalid_argument);
  EXPECT_THROW(parse_posix_tz("E5"), std::invalid_argument);
}

TEST(TimeZoneTest, UnknownZonesAndBadFilesSayWhatToDo) {
  try {
    TimeZone::load("Mars/Olympus_Mons");
    FAIL() << "an unknown zone loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Mars/Olympus_Mons"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tzdata"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TimeZone::load("../etc/passwd"), std::invalid_argument);
  EXPECT_THROW(TimeZone::from_tzif("not a tz file at all, but long enough to have a header.....", "x"), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::lending
