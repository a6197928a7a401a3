// File: operator/lending/time_zone.h
// Time zones for lending windows, read from the system's tz database (TZif files under $TZDIR or
// /usr/share/zoneinfo, as `date` reads them; the operator image needs Debian's tzdata package):
// the transition table (64-bit section of version 2+ files) and, past its last transition, the
// file's POSIX TZ footer rule ("EST5EDT,M3.2.0,M11.1.0"). "UTC" (and "Etc/UTC", "Z") needs no
// file. Civil-time helpers (Howard Hinnant's days-from-civil) convert between seconds since the
// epoch and a local calendar time.
//
//   const TimeZone tz = TimeZone::load("America/New_York");   // throws naming the file it looked for
//   const CivilTime t = tz.to_civil(now);                    // t.hour, t.weekday (0 = Sunday)
//   const int64_t utc = tz.from_civil({2026, 3, 8, 2, 30});   // gap: the time after the gap
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync::lending {

struct CivilTime {
  int64_t year = 1970;
  int month = 1;  // 1..12
  int day = 1;    // 1..31
  int hour = 0, minute = 0, second = 0;
  int weekday = 4;  // 0 = Sunday (1970-01-01 was a Thursday); filled in by to_civil
};

int64_t days_from_civil(int64_t year, int month, int day);  // days since 1970-01-01
CivilTime civil_from_seconds(int64_t seconds);               // UTC calendar time of epoch seconds
int64_t seconds_from_civil(const CivilTime& t);              // epoch seconds of a UTC calendar time
int days_in_month(int64_t year, int month);

// A POSIX TZ rule ("CET-1CEST,M3.5.0,M10.5.0/3"): standard offset, and optionally a DST offset
// with the local times it starts and ends each year.
struct PosixTzRule {
  int64_t std_offset = 0;  // seconds east of UTC
  bool has_dst = false;
  int64_t dst_offset = 0;
  // Each date: kind 'M' (month, week 1..5 where 5 = last, weekday), 'J' (day 1..365, no Feb 29)
  // or 'N' (day 0..365); time: seconds after local midnight (may be negative or > 24 h).
  struct Date {
    char kind = 'M';
    int month = 0, week = 0, weekday = 0, day = 0;
    int64_t time = 7200;
  };
  Date start, end;
};

// Throws std::invalid_argument naming what it could not read.
PosixTzRule parse_posix_tz(const std::string& rule);
// The rule's UTC offset at `utc`.
int64_t posix_tz_offset(const PosixTzRule& rule, int64_t utc);

class TimeZone {
 public:
  TimeZone();  // UTC
  // "UTC", or a tz database name such as "Europe/Paris". Throws std::invalid_argument naming
  // the name, the file looked for and the fix (install tzdata, or a valid name).
  static TimeZone load(const std::string& name);
  // From a TZif file's bytes (tests); `name` for messages.
  static TimeZone from_tzif(const std::string& bytes, const std::string& name);

  const std::string& name() const { return name_; }
  int64_t offset_at(int64_t utc) const;  // seconds east of UTC in effect at `utc`
  CivilTime to_civil(int64_t utc) const;
  // The instant a local time names: in a DST gap, the same wall-clock distance after the gap's
  // start; in an overlap, the earlier instant.
  int64_t from_civil(const CivilTime& local) const;

 private:
  std::string name_ = "UTC";
  std::vector<int64_t> transitions_;  // UTC seconds, ascending
  std::vector<int64_t> offsets_;      // offset after each transition
  int64_t initial_offset_ = 0;        // before the first transition
  bool has_footer_ = false;
  PosixTzRule footer_;
};

}  // namespace qsync::lending
