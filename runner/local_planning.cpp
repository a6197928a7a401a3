// File: runner/local_planning.cpp
// Measuring what the planner lacks, then planning the local pool (see local_planning.h).
#include "runner/local_planning.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "planner/device_profile.h"
#include "planner/local_plan.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

// Runs argv to completion with stdout and stderr to `log`; throws naming the command and log.
void run_measurement(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const std::string& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    throw std::runtime_error("planning measurement failed: `" + cmd + "` (see " + log + ")");
  }
}

std::string model_hash_suffix(const ModelDesc& m) { return model_hash_string(m.hash).substr(0, 12); }

}  // namespace

nlohmann::json rank_prediction_json(const RankPrediction& p) {
  return {{"step_seconds", p.step_seconds},
          {"compute_seconds", p.compute_seconds},
          {"wait_seconds", p.wait_seconds},
          {"peak_memory_bytes", p.peak_memory_bytes}};
}

LocalPlanning plan_local_job(const JobSpec& job, const LocalPlanningInputs& in) {
  const auto say = [&](const std::string& s) {
    if (in.say) in.say(s);
  };
  const ModelDesc model = model_desc_find(job.model);
  const std::string strategy = in.allocator.empty() ? job.allocator : in.allocator;
  const std::string worker = (fs::path(in.bin_dir) / "qsync-worker").string();
  const std::string logs = (fs::path(in.work_dir) / "logs").string();
  fs::create_directories(logs);
  const std::string profiles = !in.profiles_dir.empty() ? in.profiles_dir
                               : !job.profiles_dir.empty() ? job.profiles_dir
                                                           : (fs::path(in.work_dir) / "profiles").string();
  fs::create_directories(profiles);

  // Device profiles: one per (class as it runs, local batch), measured on this machine.
  for (const ProfileNeed& need : local_missing_profiles(job, model, ProfileStore(profiles))) {
    const std::string out = (fs::path(profiles) / device_profile_file_name(model.name, need.device_class, need.batch)).string();
    say("measuring the " + model.name + " profile of " + need.device_class + " at batch " + std::to_string(need.batch) +
        " (once; kept in " + profiles + ")");
    std::vector<std::string> args = {worker, "profile", "--model", job.model, "--device-class", need.device_class,
                                     "--batch", std::to_string(need.batch), "--threads", std::to_string(need.threads),
                                     "--out", out};
    if (!job.data.empty()) args.insert(args.end(), {"--data", job.data});
    run_measurement(args, logs + "/profile-" + need.device_class + "-b" + std::to_string(need.batch) + ".log");
  }
  // The all-reduce profile of this world size over loopback.
  const int world = int(job.local_workers.size());
  const std::string comm = (fs::path(profiles) / ("comm-w" + std::to_string(world) + ".json")).string();
  const std::string comm_bench = (fs::path(in.bin_dir) / "qsync-bench-allreduce").string();
  if (world > 1 && !fs::exists(comm) && fs::exists(comm_bench)) {
    say("measuring the all-reduce of " + std::to_string(world) + " local ranks (once; kept in " + profiles + ")");
    run_measurement({comm_bench, "--ranks", std::to_string(world), "--reps", "9", "--max-mib", "16", "--comm-profile", comm},
                    logs + "/comm-profile.log");
  }
  // Calibration statistics for the indicator.
  LocalPlanOptions options;
  options.strategy = strategy;
  if (strategy_uses_indicator(strategy) && job.calibration.empty()) {
    const std::string stats =
        (fs::path(in.work_dir) / "calibration" / (model.name + "-" + model_hash_suffix(model) + ".json")).string();
    if (!fs::exists(stats)) {
      fs::create_directories(fs::path(stats).parent_path());
      say("collecting calibration statistics of " + model.name + " for the indicator (once; kept in " + stats + ")");
      std::vector<std::string> args = {worker, "calibrate", "--model", job.model, "--out", stats, "--seed",
                                       std::to_string(job.seed)};
      if (!job.data.empty()) args.insert(args.end(), {"--data", job.data});
      run_measurement(args, logs + "/calibrate.log");
    }
    options.calibration = stats;
  }

  const LocalPlanRequest request = local_plan_request(job, ProfileStore(profiles), options);
  for (const std::string& n : request.notes) say("note: " + n);
  LocalPlanning out;
  out.allocation = allocate(request.request, request.strategy);
  const Allocation& a = out.allocation;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPrediction& p : a.predicted.ranks) ranks.push_back(rank_prediction_json(p));
  out.summary = {{"strategy", a.strategy},
                 {"indicator", request.indicator_source},
                 {"profiles", profiles},
                 {"all_reduce", request.request.comm.estimated ? "estimated" : "measured"},
                 {"predicted_step_seconds", a.predicted.step_seconds},
                 {"step_time_target_seconds", a.step_time_target},
                 {"meets_target", a.meets_target},
                 {"fits_memory", a.fits_memory},
                 {"total_indicator", a.total_indicator},
                 {"notes", a.notes},
                 {"ranks", ranks}};
  return out;
}

}  // namespace qsync
