// File: runner/strategy_comparison.h
// `qsync run --compare uniform,uniform-low-weak`: after the job, the same pool trains a few steps
// under each named strategy (same profiles, no checkpoints), and one table puts the job's plan
// beside them: local batches, each rank's precision mix, the predicted and the measured step,
// and the share of its step each rank spends waiting at the gradient sync (the straggler's
// victims wait; a balanced pool does not).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/local_runner.h"

namespace qsync {

// Each strategy's run summary (what --summary-json writes), in order. `job_run` is the job's own
// result: its profiles are reused. Throws std::invalid_argument for an unknown strategy.
std::vector<nlohmann::json> compare_strategies(const RunOptions& job_options, const RunResult& job_run,
                                               const std::vector<std::string>& strategies, int64_t steps);

// The table: the job's run first, then the comparisons.
std::string strategy_comparison_table(const nlohmann::json& job_summary, const std::vector<nlohmann::json>& runs);

}  // namespace qsync
