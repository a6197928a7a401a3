// File: planner/plan_main.cpp
// qsync-plan: chooses per-rank layer precisions (and local batches) for a job's pool and writes
// one plan file per rank (PLAN_DIR/rank-<r>.yaml, what `qsync-worker train --plan` reads).
//
//   qsync-plan --job JOB.yaml --profiles DIR --out PLAN_DIR [--strategy exact|greedy|uniform|
//              uniform-low-weak|dynamic-batching] [--indicator STATS.json [--indicator-kind
//              bidirectional|weight-error]] [--compare] [--target SECONDS] [--high P] [--low P]
//              [--batch-moves|--no-batch-moves (default: the job's planning.batchMoves)] [--bucket-mib X]
// Exit status: 0 plans written, 1 an error, 2 a usage error, 3 infeasible (a device cannot hold
// the model within its memory budget at any precision: the message names it and the budget).
//
// The pool is the job's spec.pool.local (device classes, memory budgets, local batches); the
// profiles come from a ProfileStore over DIR (measured files; GPU classes can be estimated). The
// indicator comes from calibration stats (`qsync-worker calibrate`); without them a documented
// fallback ranks the choices (indicator_fallback_table: aggressiveness x parameter share).
// Prints per rank a table (layer, precision, indicator, predicted seconds and memory), then the
// totals against the baselines; --compare runs every strategy side by side.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/device_class.h"
#include "planner/allocator.h"
#include "planner/cli_args.h"
#include "planner/indicator.h"
#include "planner/job_spec.h"
#include "planner/local_plan.h"

namespace qsync {
namespace {

const char* USAGE =
    "usage: qsync-plan --job JOB.yaml --profiles DIR (default: the job's planning.profiles) --out PLAN_DIR\n"
    "         [--strategy exact|greedy|uniform|uniform-low-weak|dynamic-batching] (default: the job's allocator)\n"
    "         [--indicator STATS.json (default: the job's planning.calibration)] [--indicator-kind bidirectional|weight-error] [--compare]\n"
    "         [--target SECONDS] [--high P] [--low P] [--batch-moves] [--bucket-mib X]\n";

struct Args {
  std::string job, profiles, out, strategy, indicator, indicator_kind, high, low;
  bool compare = false;
  std::optional<bool> batch_moves;
  double target = 0, bucket_mib = 25;
};

double parse_double(const std::string& flag, const std::string& v) {
  const double x = parse_double_flag(flag, v);
  if (!(x >= 0)) throw std::invalid_argument(flag + " expects a non-negative number, got '" + v + "'");
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string*> values = {
      {"--job", &a.job},           {"--profiles", &a.profiles}, {"--out", &a.out},
      {"--strategy", &a.strategy}, {"--indicator", &a.indicator}, {"--indicator-kind", &a.indicator_kind},
      {"--high", &a.high},         {"--low", &a.low}};
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--compare") a.compare = true;
    else if (f == "--batch-moves") a.batch_moves = true;
    else if (f == "--no-batch-moves") a.batch_moves = false;
    else if (f == "--help" || f == "-h") throw std::invalid_argument("");
    else if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value (or is unknown)");
    else if (f == "--target") a.target = parse_double(f, argv[++i]);
    else if (f == "--bucket-mib") a.bucket_mib = parse_double(f, argv[++i]);
    else if (auto it = values.find(f); it != values.end()) *it->second = argv[++i];
    else throw std::invalid_argument("unknown flag " + f);
  }
  if (a.job.empty() || a.out.empty()) throw std::invalid_argument("--job and --out are required");
  if (!a.strategy.empty()) {
    const std::vector<std::string> known = allocator_strategies();
    if (std::find(known.begin(), known.end(), a.strategy) == known.end())
      throw std::invalid_argument("unknown --strategy '" + a.strategy +
                                  "'; choose exact, greedy, uniform, uniform-low-weak or dynamic-batching");
  }
  if (!a.indicator_kind.empty() && a.indicator_kind != "bidirectional" && a.indicator_kind != "weight-error")
    throw std::invalid_argument("--indicator-kind must be bidirectional or weight-error, got '" + a.indicator_kind + "'");
  if (a.bucket_mib <= 0) throw std::invalid_argument("--bucket-mib must be positive");
  return a;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s * 1e3);
  return b;
}
std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", double(bytes) / double(1 << 20));
  return b;
}
std::string num(double v) {
  if (std::isnan(v)) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

void print_allocation(const AllocationRequest& req, const Allocation& a) {
  std::printf("strategy %s: predicted step %s ms, target %s ms (%s), total indicator %s%s\n", a.strategy.c_str(),
              ms(a.predicted.step_seconds).c_str(), ms(a.step_time_target).c_str(),
              a.meets_target ? "met" : "NOT met", num(a.total_indicator).c_str(),
              a.fits_memory ? "" : ", OVER a memory budget");
  for (size_t r = 0; r < a.plans.size(); ++r) {
    const RankPlan& p = a.plans[r];
    const RankPrediction& pr = a.predicted.ranks[r];
    const bool training = std::find(a.training_ranks.begin(), a.training_ranks.end(), r) != a.training_ranks.end();
    const int64_t budget = req.pool[r].memory_budget_bytes;
    std::printf("\nrank %zu  %s%s  local batch %lld  compute %s ms  wait %s ms  step %s ms  peak %s MiB%s  indicator %s\n",
                r, p.device_class.c_str(), training ? " (training device)" : "", (long long)p.local_batch,
                ms(pr.compute_seconds).c_str(), ms(pr.wait_seconds).c_str(), ms(pr.step_seconds).c_str(),
                mib(pr.peak_memory_bytes).c_str(), budget > 0 ? (" / " + mib(budget) + " MiB").c_str() : "",
                num(a.rank_indicator[r]).c_str());
    const DeviceProfile prof = device_profile_scaled(req.pool[r].profile, p.local_batch);
    std::printf("  %-28s %-9s %12s %12s %12s\n", "layer", "precision", "indicator", "fwd+bwd ms", "memory MiB");
    for (const LayerDesc* l : model_gemm_layers(req.model)) {
      const LayerPrecision prec = p.precision_of(l->name);
      const LayerCost& c = prof.gemm_layers.at(l->name).at(prec);
      double ind = prec == LayerPrecision::FP32 ? 0.0 : NAN;
      if (auto it = req.indicator.find(l->name); it != req.indicator.end())
        if (auto jt = it->second.find(prec); jt != it->second.end()) ind = jt->second;
      std::printf("  %-28s %-9s %12s %12s %12s\n", l->name.c_str(), layer_precision_name(prec), num(ind).c_str(),
                  ms(c.forward_seconds + c.backward_seconds).c_str(), mib(c.saved_bytes + c.weight_bytes).c_str());
    }
  }
  for (const std::string& n : a.notes) std::printf("note: %s\n", n.c_str());
}

void print_comparison(const AllocationRequest& req, const std::vector<std::string>& strategies) {
  std::printf("\n%-18s %14s %14s %12s %8s %8s\n", "strategy", "step ms", "target ms", "indicator", "target", "memory");
  for (const std::string& s : strategies) {
    try {
      const Allocation a = allocate(req, s);
      std::printf("%-18s %14s %14s %12s %8s %8s\n", s.c_str(), ms(a.predicted.step_seconds).c_str(),
                  ms(a.step_time_target).c_str(), num(a.total_indicator).c_str(), a.meets_target ? "met" : "missed",
                  a.fits_memory ? "fits" : "over");
    } catch (const std::exception& e) {
      std::printf("%-18s n/a: %s\n", s.c_str(), e.what());
    }
  }
}

int run(const Args& args) {
  const JobFile job = job_file_load(args.job);
  LocalPlanOptions options;
  options.strategy = args.strategy;
  options.calibration = args.indicator;
  options.indicator_kind = args.indicator_kind;
  options.step_time_target = args.target;
  options.high = args.high;
  options.low = args.low;
  options.batch_moves = args.batch_moves;
  options.bucket_bytes = int64_t(args.bucket_mib * double(1 << 20));
  const ProfileStore store(args.profiles.empty() ? job.resolve(job.spec.planning.profiles) : args.profiles);
  const LocalPlanRequest plan = local_plan_request(job, store, options);
  const AllocationRequest& req = plan.request;
  for (const std::string& n : plan.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  if (plan.indicator_source == "fallback")
    std::printf("indicator: FALLBACK ranking (precision aggressiveness x the layer's parameter share), not a measure of "
                "harm; pass --indicator STATS.json from `qsync-worker calibrate` for QSync's indicator\n");
  else
    std::printf("indicator: %s\n", plan.indicator_source.c_str());
  std::printf("model %s (%s), global batch %lld, %zu ranks, all-reduce %s\n", req.model.name.c_str(),
              model_hash_string(req.model.hash).c_str(), (long long)req.global_batch, req.pool.size(),
              req.comm.estimated ? "estimated" : "measured");

  const std::string& strategy = plan.strategy;
  const Allocation a = allocate(req, strategy);
  std::filesystem::create_directories(args.out);
  for (size_t r = 0; r < a.plans.size(); ++r)
    plan_file_write((std::filesystem::path(args.out) / ("rank-" + std::to_string(r) + ".yaml")).string(), a.plans[r]);
  print_allocation(req, a);
  std::printf("\nwrote %zu plans to %s\n", a.plans.size(), args.out.c_str());
  if (args.compare) {
    print_comparison(req, allocator_strategies());
  } else {
    std::vector<std::string> rows = {strategy};  // the chosen plan against the baselines
    for (const std::string s : {"uniform", "uniform-low-weak", "dynamic-batching"})
      if (s != strategy) rows.push_back(s);
    print_comparison(req, rows);
  }
  return 0;
}

}  // namespace
}  // namespace qsync

int main(int argc, char** argv) {
  qsync::Args args;
  try {
    args = qsync::parse_args(argc, argv);
  } catch (const std::exception& e) {
    if (e.what()[0] != '\0') std::fprintf(stderr, "qsync-plan: %s\n", e.what());
    std::fputs(qsync::USAGE, stderr);
    return 2;
  }
  try {
    return qsync::run(args);
  } catch (const qsync::InfeasiblePlan& e) {
    std::fprintf(stderr, "qsync-plan: infeasible: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync-plan: %s\n", e.what());
    return 1;
  }
}
