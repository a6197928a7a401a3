// File: operator/kube/kube_time.cpp
// Kubernetes timestamps (RFC 3339 in UTC, "2026-11-29T20:31:50Z"): formatting now or a given
// epoch time, and parsing one (fractional seconds and +hh:mm offsets accepted, as MicroTime
// and other servers write them).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "operator/kube/kube_client.h"

namespace qsync::kube {

std::string kube_time_format(double epoch_seconds) {
  time_t seconds = static_cast<time_t>(epoch_seconds);
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string kube_time_now() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return kube_time_format(std::chrono::duration<double>(now).count());
}

double kube_time_parse(const std::string& timestamp) {
  auto malformed = [&timestamp]() {
    return std::invalid_argument("malformed Kubernetes timestamp '" + timestamp +
                                 "' (expected RFC 3339 such as 2026-11-29T20:31:50Z)");
  };
  struct tm utc {};
  int consumed = 0;
  if (std::sscanf(timestamp.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &utc.tm_year, &utc.tm_mon, &utc.tm_mday,
                  &utc.tm_hour, &utc.tm_min, &utc.tm_sec, &consumed) != 6 ||
      consumed != 19) {
    throw malformed();
  }
  if (utc.tm_mon < 1 || utc.tm_mon > 12 || utc.tm_mday < 1 || utc.tm_mday > 31 || utc.tm_hour > 23 ||
      utc.tm_min > 59 || utc.tm_sec > 60) {
    throw malformed();
  }
  utc.tm_year -= 1900;
  utc.tm_mon -= 1;
  double seconds = static_cast<double>(timegm(&utc));
  size_t pos = 19;
  if (pos < timestamp.size() && timestamp[pos] == '.') {
    double scale = 0.1;
    ++pos;
    size_t digits = 0;
    while (pos < timestamp.size() && timestamp[pos] >= '0' && timestamp[pos] <= '9') {
      seconds += (timestamp[pos] - '0') * scale;
      scale /= 10;
      ++pos;
      ++digits;
    }
    if (digits == 0) throw malformed();
  }
  if (pos == timestamp.size()) throw malformed();
  if (timestamp[pos] == 'Z' || timestamp[pos] == 'z') {
    if (pos + 1 != timestamp.size()) throw malformed();
    return seconds;
  }
  int hours = 0, minutes = 0;
  char sign = timestamp[pos];
  if ((sign != '+' && sign != '-') || timestamp.size() != pos + 6 ||
      std::sscanf(timestamp.c_str() + pos + 1, "%2d:%2d", &hours, &minutes) != 2) {
    throw malformed();
  }
  double offset = hours * 3600.0 + minutes * 60.0;
  return sign == '+' ? seconds - offset : seconds + offset;
}

}  // namespace qsync::kube
