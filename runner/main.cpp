// File: runner/main.cpp
// qsync: the local front end.
//
//   qsync run JOB.yaml [--work-dir DIR] [--master-port P] [--summary-json FILE] [--resume]
//                      [--collective-timeout SECONDS] [--quiet] [--allocator S] [--profiles DIR]
//                      [--metrics-base-port P] [--no-pin] [--profile-rounds N]
//                      [--compare S1,S2 [--compare-steps N]] [--plans DIR]
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "planner/cli_args.h"
#include "runner/local_runner.h"
#include "runner/run_progress.h"
#include "runner/strategy_comparison.h"

namespace {

const char* USAGE =
    "usage: qsync run JOB.yaml [--work-dir DIR] [--master-port P] [--summary-json FILE] [--resume]\n"
    "                          [--collective-timeout SECONDS] [--quiet]\n"
    "                          [--allocator exact|greedy|uniform|uniform-low-weak|dynamic-batching]\n"
    "                          [--profiles DIR (measured device profiles; default <work dir>/profiles)]\n"
    "                          [--plans DIR (run the plan files rank-R.yaml there instead of planning;\n"
    "                           predicted from the profiles, scaled to the plans' batches)]\n"
    "                          [--metrics-base-port P (rank r serves Prometheus /metrics on port P+r)]\n"
    "                          [--no-pin (do not give each rank CPUs of its own)]\n"
    "                          [--profile-rounds N (rounds of the profiles it measures; default 3)]\n"
    "                          [--compare S1,S2 (after the job, train --compare-steps steps under each strategy\n"
    "                           and compare the plans: predicted and measured step, wait at the sync)]\n"
    "                          [--compare-steps N (default 30)]\n";

int run_main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) != "run") throw std::invalid_argument(std::string("unknown command '") + argv[1] + "'\n" + USAGE);
  qsync::RunOptions o;
  std::vector<std::string> compare;
  int64_t compare_steps = 30;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--work-dir") o.work_dir = value();
    else if (a == "--master-port") {
      const int64_t port = qsync::parse_int_flag(a, value());
      if (port < 0 || port > 65535) throw std::invalid_argument("--master-port takes a TCP port (0-65535; 0: a free one)");
      o.master_port = int(port);
    }
    else if (a == "--summary-json") o.summary_json = value();
    else if (a == "--collective-timeout") {
      o.collective_timeout_seconds = qsync::parse_double_flag(a, value());
      if (!(o.collective_timeout_seconds > 0) || o.collective_timeout_seconds > 1e6)
        throw std::invalid_argument("--collective-timeout takes a positive number of seconds");
    }
    else if (a == "--allocator") o.allocator = value();
    else if (a == "--profiles") o.profiles_dir = value();
    else if (a == "--plans") o.plans_dir = value();
    else if (a == "--metrics-base-port") {
      const int64_t port = qsync::parse_int_flag(a, value());
      o.metrics_base_port = int(std::clamp<int64_t>(port, 0, 65536));
      if (port < 1 || port > 65535)
        throw std::invalid_argument("--metrics-base-port takes a TCP port (1-65535); rank r then serves port P+r");
    }
    else if (a == "--compare") {
      const std::string list = value();
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) compare.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else if (a == "--compare-steps") {
      compare_steps = qsync::parse_int_flag(a, value());
      if (compare_steps < 1) throw std::invalid_argument("--compare-steps takes a positive number of steps");
    }
    else if (a == "--resume") o.resume = true;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--no-pin") o.pin_cpus = false;
    else if (a == "--profile-rounds") {
      const int64_t rounds = qsync::parse_int_flag(a, value());
      o.profile_rounds = int(std::clamp<int64_t>(rounds, 0, 1000000));
      if (rounds < 1) throw std::invalid_argument("--profile-rounds takes a positive number of rounds");
    }
    else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown argument '" + a + "'\n" + USAGE);
    else if (o.job_path.empty()) o.job_path = a;
    else throw std::invalid_argument("one job file at a time, got '" + o.job_path + "' and '" + a + "'");
  }
  if (o.job_path.empty()) throw std::invalid_argument(std::string("no job file given\n") + USAGE);
  if (o.work_dir.empty()) o.work_dir = qsync::default_work_dir(o.job_path);
  const qsync::RunResult r = qsync::run_job_locally(o);
  std::printf("\n%s", qsync::run_summary_table(r.summary).c_str());
  if (r.exit_code != 0 || compare.empty()) return r.exit_code;
  std::printf("\n");
  const std::vector<nlohmann::json> runs = qsync::compare_strategies(o, r, compare, compare_steps);
  std::printf("\n%s", qsync::strategy_comparison_table(r.summary, runs).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync: error: %s\n", e.what());
    return 1;
  }
}
