// File: worker/op_time_table.h
// An OpTimer that sums the seconds of every op it is handed ("conv2.forward", "conv2.gemm_forward",
// "conv2.cast_x", ...) and prints them as a table: where a step's time goes, per layer. The
// trainer hands it the training steps after a run's first (--op-times).
// Layer totals (".forward"/".backward") include their sub-ops (".gemm_*", ".cast_*").
#pragma once

#include <map>
#include <string>

#include "worker/layer.h"

namespace qsync {

class OpTimeTable : public OpTimer {
 public:
  void record(const std::string& op, double seconds) override;
  // Ops sorted by total time, with per-step milliseconds over `steps`.
  std::string format(int64_t steps) const;
  const std::map<std::string, std::pair<double, int64_t>>& totals() const { return totals_; }

 private:
  std::map<std::string, std::pair<double, int64_t>> totals_;  // op -> (seconds, calls)
};

}  // namespace qsync
