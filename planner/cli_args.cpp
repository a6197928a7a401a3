// File: planner/cli_args.cpp
// Whole-string number parsing for command-line flags.
#include "planner/cli_args.h"

#include <cmath>
#include <stdexcept>

namespace qsync {

int64_t parse_int_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size()) throw std::invalid_argument(flag + " expects an integer, got '" + v + "'");
  return x;
}

double parse_double_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(x))
    throw std::invalid_argument(flag + " expects a finite number, got '" + v + "'");
  return x;
}

}  // namespace qsync
