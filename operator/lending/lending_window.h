// File: operator/lending/lending_window.h
// When lending is allowed by the clock: windows that open at one cron time and close at the
// next match of another, in a time zone. A cron expression has cron's five fields, minute hour
// day-of-month month day-of-week, each `*`, a value, a range `a-b`, a step `*/n` or `a-b/n`,
// or a comma list of those; months take JAN..DEC, weekdays 0-7 (0 and 7 Sunday) or SUN..SAT;
// when both day fields are restricted a day matches either (as cron does). @hourly, @daily,
// @weekly, @monthly stand for their usual expressions.
//
//   const LendingWindow night = lending_window("0 20 * * 1-5", "0 7 * * 2-6", "America/New_York");
//   const WindowState w = window_state({night}, now);   // w.open, w.closes_at / w.opens_at
//
// A window is open at t when the latest start at or before t is later than the latest end at
// or before t (looking back at most 400 days).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

#include "operator/lending/time_zone.h"

namespace qsync::lending {

struct CronSchedule {
  std::string text;
  std::bitset<60> minutes;
  std::bitset<24> hours;
  std::bitset<32> days_of_month;  // 1..31
  std::bitset<13> months;         // 1..12
  std::bitset<7> days_of_week;    // 0 = Sunday
  bool dom_restricted = false, dow_restricted = false;

  bool matches_day(const CivilTime& local) const;  // month and day fields only
  bool matches(const CivilTime& local) const;      // to the minute
};

// Throws std::invalid_argument naming the field, the text and the accepted forms.
CronSchedule parse_cron(const std::string& text);

// The latest match at or before `utc` (to the minute), within `lookback_days`; -1 when none.
int64_t cron_latest_at_or_before(const CronSchedule& cron, const TimeZone& tz, int64_t utc, int lookback_days = 400);
// The first match strictly after `utc`, within `lookahead_days`; -1 when none.
int64_t cron_next_after(const CronSchedule& cron, const TimeZone& tz, int64_t utc, int lookahead_days = 400);

struct LendingWindow {
  CronSchedule start, end;
  TimeZone time_zone;
  bool operator==(const LendingWindow& o) const { return start.text == o.start.text && end.text == o.end.text && time_zone.name() == o.time_zone.name(); }
};

// Throws std::invalid_argument (cron or time zone) naming the bad part.
LendingWindow lending_window(const std::string& start, const std::string& end, const std::string& time_zone);

struct WindowState {
  bool open = false;
  int64_t closes_at = -1;  // open: when the open window closes (-1: no end within the horizon)
  int64_t opens_at = -1;   // closed: when the next window opens (-1: none within the horizon)
  size_t window = 0;       // which window (open: the one that is open)
};

// Open when any window is open (closes_at: the latest close of the open ones).
WindowState window_state(const std::vector<LendingWindow>& windows, int64_t utc);

}  // namespace qsync::lending
