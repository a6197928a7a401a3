// File: planner/job_quantities.cpp
// Kubernetes-style quantities in job fields: memory ("2Gi", "512Mi", bytes) and durations
// ("250ms", "1.5s", "2m", seconds), declared in planner/job_spec.h.
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "planner/job_spec.h"

namespace qsync {
namespace {

// Whether `s` is `suffix` after at least one other character.
bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `text` read whole as a decimal number (std::stod's syntax); nullopt when any of it is left over.
std::optional<double> whole_number(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return v;
}

}  // namespace

int64_t parse_memory_quantity(const std::string& s, const std::string& what) {
  static const std::pair<const char*, int64_t> suffixes[] = {
      {"Ki", 1ll << 10}, {"Mi", 1ll << 20}, {"Gi", 1ll << 30}, {"Ti", 1ll << 40},
      {"k", 1000ll},     {"M", 1000000ll},  {"G", 1000000000ll}, {"T", 1000000000000ll}};
  for (const auto& [suffix, mult] : suffixes) {
    if (!has_suffix(s, suffix)) continue;
    const std::optional<double> v = whole_number(s.substr(0, s.size() - std::string(suffix).size()));
    if (!v || !(*v >= 0)) break;
    if (!(*v * double(mult) < 9.2e18))  // int64 bytes (and no inf or nan)
      throw std::invalid_argument(what + ": '" + s + "' is too large a memory quantity (at most about 8Ei bytes)");
    return int64_t(*v * double(mult));
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
  for (const auto& [suffix, scale] : units)
    if (has_suffix(s, suffix)) {
      number = s.substr(0, s.size() - std::string(suffix).size());
      unit = scale;
      break;
    }
  const std::optional<double> v = number.empty() ? std::nullopt : whole_number(number);
  if (!v || !(*v > 0) || !std::isfinite(*v * unit))
    throw std::invalid_argument(what + ": '" + s + "' is not a positive duration (use e.g. 250ms, 1.5s or seconds)");
  return *v * unit;
}

}  // namespace qsync
