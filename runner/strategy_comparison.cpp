// File: runner/strategy_comparison.cpp
// Short runs of the job under other strategies, and their table (strategy_comparison.h).
#include "runner/strategy_comparison.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "planner/allocator.h"

namespace qsync {
namespace {

double number(const nlohmann::json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0;
}

// "conv1=fp32 conv2=int8-all ..." -> "fp32 x3, int8-all x3" (in the plan's order of first use).
std::string precision_mix(const std::string& plan) {
  std::vector<std::pair<std::string, int>> mix;
  size_t pos = 0;
  while (pos < plan.size()) {
    const size_t end = std::min(plan.find(' ', pos), plan.size());
    const std::string item = plan.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string p = item.substr(eq + 1);
      auto it = std::find_if(mix.begin(), mix.end(), [&](const auto& m) { return m.first == p; });
      if (it == mix.end()) mix.push_back({p, 1});
      else ++it->second;
    }
    pos = end + 1;
  }
  std::string out;
  for (const auto& [p, n] : mix) out += (out.empty() ? "" : ", ") + p + " x" + std::to_string(n);
  return out.empty() ? "?" : out;
}

std::string row(const std::string& label, const nlohmann::json& s) {
  std::string batches, mixes, waits;
  double measured = 0;
  for (const nlohmann::json& r : s.value("ranks", nlohmann::json::array())) {
    const std::string sep = batches.empty() ? "" : "/";
    batches += sep + std::to_string(int64_t(number(r, "local_batch")));
    mixes += (mixes.empty() ? "" : "; ") + std::string("r") + std::to_string(r.value("rank", 0)) + " " +
             precision_mix(r.value("plan", nlohmann::json()).is_string() ? r["plan"].get<std::string>() : "");
    const double step = number(r, "median_step_seconds");
    measured = std::max(measured, step);
    char w[16];
    std::snprintf(w, sizeof w, "%.0f%%", step > 0 ? 100.0 * number(r, "median_wait_seconds") / step : 0.0);
    waits += sep + w;
  }
  const double predicted = number(s.value("plan", nlohmann::json::object()), "predicted_step_seconds");
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-26s %-10s %9.1f %9.1f %+7.1f%%  %-12s %s\n", label.c_str(), batches.c_str(),
                predicted * 1e3, measured * 1e3, measured > 0 ? (predicted / measured - 1) * 100 : 0.0, waits.c_str(),
                mixes.c_str());
  return buf;
}

}  // namespace

std::vector<nlohmann::json> compare_strategies(const RunOptions& job_options, const RunResult& job_run,
                                               const std::vector<std::string>& strategies, int64_t steps) {
  const std::vector<std::string> known = allocator_strategies();
  for (const std::string& s : strategies)
    if (std::find(known.begin(), known.end(), s) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw std::invalid_argument("--compare: unknown strategy '" + s + "'; choose from " + list);
    }
  std::vector<nlohmann::json> out;
  for (const std::string& s : strategies) {
    RunOptions o = job_options;
    o.allocator = s;
    o.steps = steps;
    o.checkpoints = false;
    o.resume = false;
    o.quiet = true;
    o.summary_json.clear();
    o.metrics_base_port = 0;
    o.master_port = 0;
    o.work_dir = (std::filesystem::path(job_options.work_dir) / ("compare-" + s)).string();
    if (job_run.plan.is_object() && job_run.plan.contains("profiles")) o.profiles_dir = job_run.plan["profiles"];
    std::printf("comparing: %s (%lld steps)\n", s.c_str(), (long long)steps);
    std::fflush(stdout);
    const RunResult r = run_job_locally(o);
    if (r.exit_code != 0) throw std::runtime_error("the comparison run of " + s + " failed (logs in " + o.work_dir + "/logs)");
    out.push_back(r.summary);
  }
  return out;
}

std::string strategy_comparison_table(const nlohmann::json& job_summary, const std::vector<nlohmann::json>& runs) {
  std::string out =
      "strategy                   batches    pred. ms  meas. ms  pred/meas wait share  precisions per rank\n";
  const std::string own = job_summary.value("plan", nlohmann::json::object()).value("strategy", std::string("?"));
  out += row(own + " (the job's plan)", job_summary);
  for (const nlohmann::json& s : runs) out += row(s.value("plan", nlohmann::json::object()).value("strategy", std::string("?")), s);
  return out;
}

}  // namespace qsync
