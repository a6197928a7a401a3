// File: planner/job_quantities.cpp
// Kubernetes-style quantities in job fields: memory ("2Gi", "512Mi", bytes) and durations
// ("250ms", "1.5s", "2m", seconds), declared in planner/job_spec.h.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "planner/job_spec.h"

namespace qsync {

int64_t parse_memory_quantity(const std::string& s, const std::string& what) {
  static const std::pair<const char*, int64_t> suffixes[] = {
      {"Ki", 1ll << 10}, {"Mi", 1ll << 20}, {"Gi", 1ll << 30}, {"Ti", 1ll << 40},
      {"k", 1000ll},     {"M", 1000000ll},  {"G", 1000000000ll}, {"T", 1000000000000ll}};
  for (const auto& [suffix, mult] : suffixes) {
    const std::string sf = suffix;
    if (s.size() > sf.size() && s.compare(s.size() - sf.size(), sf.size(), sf) == 0) {
      const std::string number = s.substr(0, s.size() - sf.size());
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(number, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != number.size() || !(v >= 0)) break;
      if (!(v * double(mult) < 9.2e18))  // int64 bytes (and no inf or nan)
        throw std::invalid_argument(what + ": '" + s + "' is too large a memory quantity (at most about 8Ei bytes)");
      return int64_t(v * double(mult));
    }
  }
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || v < 0)
    throw std::invalid_argument(what + ": '" + s + "' is not a memory quantity (use e.g. 512Mi, 2Gi or bytes)");
  return v;
}

double parse_duration_seconds(const std::string& s, const std::string& what) {
  static const std::pair<const char*, double> units[] = {{"ms", 1e-3}, {"us", 1e-6}, {"s", 1.0}, {"m", 60.0}};
  std::string number = s;
  double unit = 1.0;
  for (const auto& [suffix, scale] : units) {
    const std::string sf = suffix;
    if (s.size() > sf.size() && s.compare(s.size() - sf.size(), sf.size(), sf) == 0) {
      number = s.substr(0, s.size() - sf.size());
      unit = scale;
      break;
    }
  }
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || !(v > 0) || !std::isfinite(v * unit))
    throw std::invalid_argument(what + ": '" + s + "' is not a positive duration (use e.g. 250ms, 1.5s or seconds)");
  return v * unit;
}

}  // namespace qsync
