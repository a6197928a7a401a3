// File: worker/op_time_table.cpp
// Per-op time accumulation and its table.
#include "worker/op_time_table.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace qsync {

void OpTimeTable::record(const std::string& op, double seconds) {
  auto& t = totals_[op];
  t.first += seconds;
  t.second += 1;
}

std::string OpTimeTable::format(int64_t steps) const {
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::string out = "op                                   ms/step    calls/step\n";
  char buf[160];
  for (const auto& [op, t] : rows) {
    std::snprintf(buf, sizeof buf, "%-36s %8.2f %10.1f\n", op.c_str(), t.first * 1e3 / double(std::max<int64_t>(1, steps)),
                  double(t.second) / double(std::max<int64_t>(1, steps)));
    out += buf;
  }
  return out;
}

}  // namespace qsync
