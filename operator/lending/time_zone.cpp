// File: operator/lending/time_zone.cpp
// TZif files (RFC 8536), POSIX TZ rules and civil-time arithmetic (see time_zone.h).
#include "operator/lending/time_zone.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace qsync::lending {
namespace {

bool leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Big-endian integers of a TZif file.
int64_t read_be(const std::string& b, size_t at, int bytes) {
  if (at + size_t(bytes) > b.size()) throw std::invalid_argument("truncated");
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + size_t(i)]);
  if (bytes == 4) return int64_t(int32_t(uint32_t(v)));
  return int64_t(v);
}

// "[+-]hh[:mm[:ss]]" at s[i]; advances i.
int64_t parse_hms(const std::string& s, size_t& i, const std::string& rule) {
  int sign = 1;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) sign = s[i++] == '-' ? -1 : 1;
  int64_t parts[3] = {0, 0, 0};
  for (int p = 0; p < 3; ++p) {
    if (p > 0) {
      if (i >= s.size() || s[i] != ':') break;
      ++i;
    }
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
      throw std::invalid_argument("POSIX TZ rule '" + rule + "': expected a number at position " + std::to_string(i));
    int64_t v = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
    parts[p] = v;
  }
  return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]);
}

std::string parse_tz_name(const std::string& s, size_t& i, const std::string& rule) {
  const size_t from = i;
  if (i < s.size() && s[i] == '<') {
    const size_t close = s.find('>', i);
    if (close == std::string::npos) throw std::invalid_argument("POSIX TZ rule '" + rule + "': unclosed '<'");
    i = close + 1;
    return s.substr(from + 1, close - from - 1);
  }
  while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
  if (i - from < 3) throw std::invalid_argument("POSIX TZ rule '" + rule + "': a zone name needs 3 or more letters");
  return s.substr(from, i - from);
}

PosixTzRule::Date parse_tz_date(const std::string& s, size_t& i, const std::string& rule) {
  PosixTzRule::Date d;
  auto number = [&] {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i])))
      throw std::invalid_argument("POSIX TZ rule '" + rule + "': expected a number at position " + std::to_string(i));
    int v = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
    return v;
  };
  auto dot = [&] {
    if (i >= s.size() || s[i] != '.') throw std::invalid_argument("POSIX TZ rule '" + rule + "': expected '.'");
    ++i;
  };
  if (i < s.size() && s[i] == 'M') {
    ++i;
    d.kind = 'M';
    d.month = number();
    dot();
    d.week = number();
    dot();
    d.weekday = number();
    if (d.month < 1 || d.month > 12 || d.week < 1 || d.week > 5 || d.weekday > 6)
      throw std::invalid_argument("POSIX TZ rule '" + rule + "': a date Mm.w.d needs m 1-12, w 1-5, d 0-6");
  } else if (i < s.size() && s[i] == 'J') {
    ++i;
    d.kind = 'J';
    d.day = number();
  } else {
    d.kind = 'N';
    d.day = number();
  }
  if (i < s.size() && s[i] == '/') {
    ++i;
    d.time = parse_hms(s, i, rule);
  }
  return d;
}

// Local seconds (since the epoch, in the zone's time) of a rule date in `year`.
int64_t rule_date_local(const PosixTzRule::Date& d, int64_t year) {
  int64_t day = 0;
  if (d.kind == 'M') {
    const int64_t first = days_from_civil(year, d.month, 1);
    const int first_weekday = int(((first % 7) + 11) % 7);  // 1970-01-01 (day 0) was a Thursday (4)
    int dom = 1 + (d.weekday - first_weekday + 7) % 7 + (d.week - 1) * 7;
    while (dom > days_in_month(year, d.month)) dom -= 7;
    day = first + dom - 1;
  } else if (d.kind == 'J') {
    day = days_from_civil(year, 1, 1) + d.day - 1 + (leap(year) && d.day >= 60 ? 1 : 0);
  } else {
    day = days_from_civil(year, 1, 1) + d.day;
  }
  return day * 86400 + d.time;
}

}  // namespace

int days_in_month(int64_t year, int month) {
  static const int DAYS[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && leap(year) ? 29 : DAYS[month - 1];
}

int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = floor_div(y, 400);
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

CivilTime civil_from_seconds(int64_t seconds) {
  const int64_t days = floor_div(seconds, 86400);
  const int64_t rest = seconds - days * 86400;
  const int64_t z = days + 719468;
  const int64_t era = floor_div(z, 146097);
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  CivilTime t;
  t.day = int(doy - (153 * mp + 2) / 5 + 1);
  t.month = int(mp < 10 ? mp + 3 : mp - 9);
  t.year = yoe + era * 400 + (t.month <= 2);
  t.hour = int(rest / 3600);
  t.minute = int(rest % 3600 / 60);
  t.second = int(rest % 60);
  t.weekday = int(((days % 7) + 11) % 7);
  return t;
}

int64_t seconds_from_civil(const CivilTime& t) {
  return days_from_civil(t.year, t.month, t.day) * 86400 + int64_t(t.hour) * 3600 + int64_t(t.minute) * 60 + t.second;
}

PosixTzRule parse_posix_tz(const std::string& rule) {
  PosixTzRule r;
  size_t i = 0;
  parse_tz_name(rule, i, rule);
  r.std_offset = -parse_hms(rule, i, rule);  // POSIX counts west of UTC as positive
  if (i == rule.size()) return r;
  r.has_dst = true;
  parse_tz_name(rule, i, rule);
  r.dst_offset = r.std_offset + 3600;
  if (i < rule.size() && rule[i] != ',') r.dst_offset = -parse_hms(rule, i, rule);
  if (i == rule.size()) {  // POSIX's default: the US rules
    r.start = {'M', 3, 2, 0, 0, 7200};
    r.end = {'M', 11, 1, 0, 0, 7200};
    return r;
  }
  if (rule[i] != ',') throw std::invalid_argument("POSIX TZ rule '" + rule + "': expected ',' before the DST start");
  ++i;
  r.start = parse_tz_date(rule, i, rule);
  if (i >= rule.size() || rule[i] != ',') throw std::invalid_argument("POSIX TZ rule '" + rule + "': expected ',' before the DST end");
  ++i;
  r.end = parse_tz_date(rule, i, rule);
  if (i != rule.size()) throw std::invalid_argument("POSIX TZ rule '" + rule + "': unexpected text at position " + std::to_string(i));
  return r;
}

int64_t posix_tz_offset(const PosixTzRule& r, int64_t utc) {
  if (!r.has_dst) return r.std_offset;
  const int64_t year = civil_from_seconds(utc + r.std_offset).year;
  // The start is given in standard time, the end in DST.
  const int64_t start = rule_date_local(r.start, year) - r.std_offset;
  const int64_t end = rule_date_local(r.end, year) - r.dst_offset;
  const bool dst = start < end ? (utc >= start && utc < end) : !(utc >= end && utc < start);
  return dst ? r.dst_offset : r.std_offset;
}

TimeZone::TimeZone() = default;

TimeZone TimeZone::from_tzif(const std::string& b, const std::string& name) {
  const std::string where = "time zone " + name + ": ";
  try {
    if (b.size() < 44 || b.compare(0, 4, "TZif") != 0) throw std::invalid_argument("not a TZif file");
    auto counts = [&](size_t at) {
      std::vector<int64_t> c(6);
      for (int k = 0; k < 6; ++k) c[size_t(k)] = read_be(b, at + 20 + size_t(k) * 4, 4);
      return c;  // isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
    };
    size_t at = 0;
    std::vector<int64_t> c = counts(at);
    int time_bytes = 4;
    if (b[4] >= '2') {  // skip the 32-bit block to the 64-bit one
      at += 44 + size_t(c[3] * 4 + c[3] + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0]);
      if (b.compare(at, 4, "TZif") != 0) throw std::invalid_argument("no second header");
      c = counts(at);
      time_bytes = 8;
    }
    size_t p = at + 44;
    const int64_t timecnt = c[3], typecnt = c[4];
    if (typecnt < 1) throw std::invalid_argument("no local time types");
    TimeZone tz;
    tz.name_ = name;
    std::vector<int64_t> type_of(static_cast<size_t>(timecnt));
    for (int64_t k = 0; k < timecnt; ++k) tz.transitions_.push_back(read_be(b, p + size_t(k * time_bytes), time_bytes));
    p += size_t(timecnt * time_bytes);
    for (int64_t k = 0; k < timecnt; ++k) type_of[size_t(k)] = static_cast<unsigned char>(b.at(p + size_t(k)));
    p += size_t(timecnt);
    std::vector<int64_t> type_offset(static_cast<size_t>(typecnt));
    for (int64_t k = 0; k < typecnt; ++k) type_offset[size_t(k)] = read_be(b, p + size_t(k) * 6, 4);
    p += size_t(typecnt * 6 + c[5] + c[2] * (time_bytes + 4) + c[1] + c[0]);
    for (int64_t k = 0; k < timecnt; ++k) {
      if (type_of[size_t(k)] >= typecnt) throw std::invalid_argument("a transition names a missing type");
      tz.offsets_.push_back(type_offset[size_t(type_of[size_t(k)])]);
    }
    tz.initial_offset_ = type_offset[0];
    if (time_bytes == 8 && p < b.size() && b[p] == '\n') {
      const size_t end = b.find('\n', p + 1);
      const std::string footer = end == std::string::npos ? "" : b.substr(p + 1, end - p - 1);
      if (!footer.empty()) {
        tz.footer_ = parse_posix_tz(footer);
        tz.has_footer_ = true;
      }
    }
    return tz;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + e.what());
  }
}

TimeZone TimeZone::load(const std::string& name) {
  if (name.empty() || name == "UTC" || name == "Etc/UTC" || name == "Z") return TimeZone();
  if (name.find("..") != std::string::npos || name.front() == '/')
    throw std::invalid_argument("time zone '" + name + "' is not a tz database name such as Europe/Paris");
  const char* env = std::getenv("TZDIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : "/usr/share/zoneinfo";
  const std::string path = dir + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::invalid_argument("time zone '" + name + "' is unknown: no file " + path +
                                " (use a tz database name such as America/New_York, or install the tzdata package)");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return from_tzif(bytes.str(), name);
}

int64_t TimeZone::offset_at(int64_t utc) const {
  if (transitions_.empty() || utc < transitions_.front()) {
    if (transitions_.empty() && has_footer_) return posix_tz_offset(footer_, utc);
    return initial_offset_;
  }
  if (utc >= transitions_.back() && has_footer_) return posix_tz_offset(footer_, utc);
  const size_t k = size_t(std::upper_bound(transitions_.begin(), transitions_.end(), utc) - transitions_.begin()) - 1;
  return offsets_[k];
}

CivilTime TimeZone::to_civil(int64_t utc) const { return civil_from_seconds(utc + offset_at(utc)); }

int64_t TimeZone::from_civil(const CivilTime& local) const {
  const int64_t l = seconds_from_civil(local);
  const int64_t before = offset_at(l - 26 * 3600), after = offset_at(l + 26 * 3600);
  const int64_t u_before = l - before, u_after = l - after;
  const bool before_ok = offset_at(u_before) == before, after_ok = offset_at(u_after) == after;
  if (before_ok && after_ok) return std::min(u_before, u_after);  // an overlap: the earlier instant
  if (before_ok) return u_before;
  if (after_ok) return u_after;
  return u_before;  // a gap: read with the offset before it, i.e. as far past the gap's start
}

}  // namespace qsync::lending
