// File: planner/median.h
// The median of timing samples, as every report quotes them (step times, profiled ops, inference
// latencies, the profiling world's steps): the middle value, the mean of the two middle values for
// an even count, 0 for no samples.
#pragma once

#include <algorithm>
#include <vector>

namespace qsync {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace qsync
