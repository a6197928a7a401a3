// File: operator/controller/micro_time.cpp
// Formatting and parsing of Kubernetes MicroTime (UTC, microseconds).
#include "operator/controller/micro_time.h"

#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace qsync::controller {

std::string micro_time_format(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto micros = duration_cast<microseconds>(t.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(micros / 1000000);
  long fraction = static_cast<long>(micros % 1000000);
  if (fraction < 0) {
    fraction += 1000000;
    seconds -= 1;
  }
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // room for any int fields, which the compiler cannot bound
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, fraction);
  return text;
}

std::string micro_time_now() { return micro_time_format(std::chrono::system_clock::now()); }

std::chrono::system_clock::time_point micro_time_parse(const std::string& text) {
  std::tm utc{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &utc.tm_year, &utc.tm_mon, &utc.tm_mday, &utc.tm_hour,
                  &utc.tm_min, &utc.tm_sec, &consumed) != 6) {
    throw std::invalid_argument("'" + text + "' is not an RFC 3339 time such as 2026-11-29T20:31:50.123456Z");
  }
  long micros = 0;
  size_t pos = static_cast<size_t>(consumed);
  if (pos < text.size() && text[pos] == '.') {
    int digits = 0;
    for (++pos; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, ++digits) {
      if (digits < 6) micros = micros * 10 + (text[pos] - '0');
    }
    for (; digits < 6; ++digits) micros *= 10;
  }
  if (pos >= text.size() || text[pos] != 'Z' || pos + 1 != text.size()) {
    throw std::invalid_argument("'" + text + "' is not a UTC time ending in Z such as 2026-11-29T20:31:50.123456Z");
  }
  utc.tm_year -= 1900;
  utc.tm_mon -= 1;
  const std::time_t seconds = timegm(&utc);
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds) + std::chrono::microseconds(micros));
}

}  // namespace qsync::controller
