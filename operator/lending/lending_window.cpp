// File: operator/lending/lending_window.cpp
// Cron parsing and matching in a time zone, and lending windows (see lending_window.h).
#include "operator/lending/lending_window.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

namespace qsync::lending {
namespace {

const char* FORMS = "each field is *, N, A-B, */S or A-B/S, or a comma list of them";

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

int field_value(const std::string& text, const std::vector<std::string>& names, int base, const std::string& what) {
  const std::string u = upper(text);
  for (size_t i = 0; i < names.size(); ++i)
    if (u == names[i]) return int(i) + base;
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    throw std::invalid_argument("'" + text + "' in the " + what + " field is not a number" +
                                (names.empty() ? "" : " or a name such as " + names[0]));
  return std::stoi(text);
}

// Sets the bits of one field ("1-5", "*/15", "MON,WED") within [lo, hi].
template <size_t N>
bool parse_field(const std::string& text, int lo, int hi, const std::vector<std::string>& names, int name_base,
                 const std::string& what, std::bitset<N>& bits) {
  bool restricted = false;
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) {
    int step = 1;
    const size_t slash = part.find('/');
    std::string range = part.substr(0, slash);
    if (slash != std::string::npos) {
      step = field_value(part.substr(slash + 1), {}, 0, what);
      if (step < 1) throw std::invalid_argument("the step in '" + part + "' (" + what + ") must be at least 1");
    }
    int from = lo, to = hi;
    if (range == "*") {
      restricted = restricted || step != 1;
    } else {
      restricted = true;
      const size_t dash = range.find('-');
      from = field_value(range.substr(0, dash), names, name_base, what);
      to = dash == std::string::npos ? (slash == std::string::npos ? from : hi) : field_value(range.substr(dash + 1), names, name_base, what);
      if (from < lo || to > hi || from > to)
        throw std::invalid_argument("'" + part + "' is out of range for the " + what + " field (" + std::to_string(lo) + "-" +
                                    std::to_string(hi) + ")");
    }
    for (int v = from; v <= to; v += step) bits.set(size_t(v));
  }
  return restricted;
}

}  // namespace

bool CronSchedule::matches_day(const CivilTime& t) const {
  if (!months.test(size_t(t.month))) return false;
  const bool dom = days_of_month.test(size_t(t.day)), dow = days_of_week.test(size_t(t.weekday));
  if (dom_restricted && dow_restricted) return dom || dow;
  return dom && dow;
}

bool CronSchedule::matches(const CivilTime& t) const {
  return matches_day(t) && hours.test(size_t(t.hour)) && minutes.test(size_t(t.minute));
}

CronSchedule parse_cron(const std::string& text) {
  std::string expr = text;
  if (expr == "@hourly") expr = "0 * * * *";
  if (expr == "@daily" || expr == "@midnight") expr = "0 0 * * *";
  if (expr == "@weekly") expr = "0 0 * * 0";
  if (expr == "@monthly") expr = "0 0 1 * *";
  std::istringstream in(expr);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  const std::string where = "cron expression '" + text + "': ";
  if (f.size() != 5)
    throw std::invalid_argument(where + "expected 5 fields (minute hour day-of-month month day-of-week), got " +
                                std::to_string(f.size()) + "; " + FORMS);
  CronSchedule c;
  c.text = text;
  try {
    parse_field(f[0], 0, 59, {}, 0, "minute", c.minutes);
    parse_field(f[1], 0, 23, {}, 0, "hour", c.hours);
    c.dom_restricted = parse_field(f[2], 1, 31, {}, 0, "day-of-month", c.days_of_month);
    parse_field(f[3], 1, 12, {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}, 1,
                "month", c.months);
    std::bitset<8> dow;
    c.dow_restricted = parse_field(f[4], 0, 7, {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}, 0, "day-of-week", dow);
    for (size_t d = 0; d < 7; ++d) c.days_of_week[d] = dow[d];
    if (dow[7]) c.days_of_week.set(0);  // 7 is Sunday too
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + e.what() + "; " + FORMS);
  }
  return c;
}

int64_t cron_latest_at_or_before(const CronSchedule& cron, const TimeZone& tz, int64_t utc, int lookback_days) {
  const CivilTime now = tz.to_civil(utc);
  const int64_t today = days_from_civil(now.year, now.month, now.day);
  for (int64_t d = today; d >= today - lookback_days; --d) {
    CivilTime day = civil_from_seconds(d * 86400);
    if (!cron.matches_day(day)) continue;
    for (int h = 23; h >= 0; --h) {
      if (!cron.hours.test(size_t(h))) continue;
      for (int m = 59; m >= 0; --m) {
        if (!cron.minutes.test(size_t(m))) continue;
        day.hour = h;
        day.minute = m;
        day.second = 0;
        const int64_t at = tz.from_civil(day);
        if (at <= utc) return at;
      }
    }
  }
  return -1;
}

int64_t cron_next_after(const CronSchedule& cron, const TimeZone& tz, int64_t utc, int lookahead_days) {
  const CivilTime now = tz.to_civil(utc);
  const int64_t today = days_from_civil(now.year, now.month, now.day);
  for (int64_t d = today; d <= today + lookahead_days; ++d) {
    CivilTime day = civil_from_seconds(d * 86400);
    if (!cron.matches_day(day)) continue;
    for (int h = 0; h < 24; ++h) {
      if (!cron.hours.test(size_t(h))) continue;
      for (int m = 0; m < 60; ++m) {
        if (!cron.minutes.test(size_t(m))) continue;
        day.hour = h;
        day.minute = m;
        day.second = 0;
        const int64_t at = tz.from_civil(day);
        if (at > utc) return at;
      }
    }
  }
  return -1;
}

LendingWindow lending_window(const std::string& start, const std::string& end, const std::string& time_zone) {
  return {parse_cron(start), parse_cron(end), TimeZone::load(time_zone)};
}

WindowState window_state(const std::vector<LendingWindow>& windows, int64_t utc) {
  WindowState out;
  for (size_t i = 0; i < windows.size(); ++i) {
    const LendingWindow& w = windows[i];
    const int64_t started = cron_latest_at_or_before(w.start, w.time_zone, utc);
    const int64_t ended = cron_latest_at_or_before(w.end, w.time_zone, utc);
    if (started >= 0 && started > ended) {
      const int64_t closes = cron_next_after(w.end, w.time_zone, utc);
      if (!out.open || closes < 0 || (out.closes_at >= 0 && closes > out.closes_at)) {
        out.closes_at = closes;
        out.window = i;
      }
      out.open = true;
    } else if (!out.open) {
      const int64_t opens = cron_next_after(w.start, w.time_zone, utc);
      if (opens >= 0 && (out.opens_at < 0 || opens < out.opens_at)) {
        out.opens_at = opens;
        out.window = i;
      }
    }
  }
  if (out.open) out.opens_at = -1;
  return out;
}

}  // namespace qsync::lending
