// File: runner/local_planning.cpp
// Measuring what the planner lacks, then planning the local pool (see local_planning.h).
#include "runner/local_planning.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "planner/device_profile.h"
#include "planner/allocator_model.h"
#include "planner/local_plan.h"
#include "planner/replayer.h"
#include "planner/shared_cpu_model.h"
#include "runner/cpu_pinning.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

struct Measurement {
  std::vector<std::string> args;
  std::string log;
  std::vector<int> cpus;  // pinned there (empty: not pinned)
  pid_t pid = -1;
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
};

// Starts argv with stdout and stderr to `log`, on m.cpus.
void start_measurement(Measurement& m) {
  const std::vector<std::string>& args = m.args;
  const std::string& log = m.log;
  const std::vector<int>& cpus = m.cpus;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    for (const auto& [k, v] : m.env) setenv(k.c_str(), v.c_str(), 1);
    try {
      pin_to_cpus(cpus);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      _exit(127);
    }
    std::vector<char*> argv;
    for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  m.pid = pid;
}

// Waits for every started measurement; throws naming the first failed command and its log.
// The measurements run as one pool (a rendezvous): once one fails, the others would wait for it
// until their collective timeout, so they are killed at once.
void finish_measurements(std::vector<Measurement>& ms) {
  std::string failed;
  for (size_t left = std::count_if(ms.begin(), ms.end(), [](const Measurement& m) { return m.pid >= 0; }); left > 0;) {
    bool reaped = false;
    for (Measurement& m : ms) {
      if (m.pid < 0) continue;
      int status = 0;
      const pid_t got = waitpid(m.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      m.pid = -1;
      --left;
      reaped = true;
      if ((got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) && failed.empty()) {
        std::string cmd;
        for (const std::string& a : m.args) cmd += (cmd.empty() ? "" : " ") + a;
        failed = "planning measurement failed: `" + cmd + "` (see " + m.log + ")";
        if (got > 0 && WIFSIGNALED(status)) failed += ", killed by signal " + std::to_string(WTERMSIG(status));
        for (const Measurement& other : ms)
          if (other.pid >= 0) kill(other.pid, SIGKILL);
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!failed.empty()) throw std::runtime_error(failed);
}

// Runs argv to completion with stdout and stderr to `log`; throws naming the command and log.
void run_measurement(const std::vector<std::string>& args, const std::string& log) {
  std::vector<Measurement> one{{args, log, {}, -1, {}}};
  start_measurement(one.front());
  finish_measurements(one);
}

std::string model_hash_suffix(const ModelDesc& m) { return model_hash_string(m.hash).substr(0, 12); }

}  // namespace

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error(std::string("cannot find a free loopback port: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(a.sin_port);
}

// The plans in `dir` (rank-R.yaml) as an Allocation: their precisions and batches, and the
// replayer's prediction of the step they make over the request's profiles.
namespace {

Allocation replay_given_plans(const AllocationRequest& req, const std::string& dir) {
  Allocation a;
  a.strategy = "given plans (" + dir + ")";
  std::vector<ReplayRank> replay;
  int64_t total = 0;
  for (size_t r = 0; r < req.pool.size(); ++r) {
    RankPlan p = plan_file_load((fs::path(dir) / ("rank-" + std::to_string(r) + ".yaml")).string(), req.model);
    if (p.local_batch <= 0) p.local_batch = resolve_local_batches(req).at(r);
    p.rank = int(r);
    total += p.local_batch;
    a.plans.push_back(p);
  }
  if (total != req.global_batch)
    throw std::invalid_argument("the plans in " + dir + " give local batches adding up to " + std::to_string(total) +
                                ", not the job's globalBatch " + std::to_string(req.global_batch));
  for (size_t r = 0; r < a.plans.size(); ++r) replay.push_back({&req.pool[r].profile, a.plans[r]});
  a.predicted = replay_step(req.model, replay, req.comm, req.bucket_bytes);
  a.step_time_target = a.predicted.step_seconds;
  a.meets_target = true;
  for (size_t r = 0; r < a.plans.size(); ++r) a.plans[r].predicted_step_seconds = a.predicted.ranks[r].step_seconds;
  return a;
}

// The world a pool's ranks form on this machine, as its profiles record it
// (DeviceProfile::world_signature): every rank's class@batch x threads, pinned or not.
std::string local_world_signature(const JobSpec& job, bool pinned) {
  std::string out;
  for (size_t r = 0; r < job.pool.local.size(); ++r) {
    const LocalWorker& w = job.pool.local[r];
    if (r > 0) out += ',';
    out += local_run_class(w.device_class);
    out += '@';
    out += std::to_string(local_batch_of(job, r));
    out += 'x';
    out += std::to_string(w.threads);
  }
  out += pinned ? " pinned" : " unpinned";
  return out;
}

// Unpinned ranks share the machine's CPUs: the shared-CPU model fitted on the profiling world's
// measured step (planner/shared_cpu_model.h). None, with a note, when no profile of the pool was
// measured in its own world.
std::optional<SharedCpus> shared_cpus_of(const JobSpec& job, const AllocationRequest& req, const std::string& world,
                                         const std::function<void(const std::string&)>& say) {
  std::vector<const DeviceProfile*> pool;
  for (const PoolRank& d : req.pool) pool.push_back(&d.profile);
  std::vector<int> threads;
  for (const LocalWorker& w : job.pool.local) threads.push_back(std::max(1, int(w.threads)));
  const int cpus = std::max<int>(1, int(affinity_cpus().size()));
  std::optional<SharedCpus> s = shared_cpus_fit(req.model, pool, threads, cpus, req.comm, req.bucket_bytes, world);
  if (!s)
    say("note: the ranks share the CPUs, but no profile of this pool was measured in its own world (" + world +
        "): predictions leave out what sharing costs; delete the pool's profiles to measure them again");
  return s;
}

// The allocation's predictions on the shared CPUs, and its step target back in their units; the
// plan stays.
void share_allocation_cpus(Allocation& a, const SharedCpus& s, const std::function<void(const std::string&)>& say) {
  share_cpus(a.predicted, s);
  a.step_time_target *= s.uniform_ratio;
  a.meets_target = step_meets_target(a.predicted, a.step_time_target);
  for (size_t r = 0; r < a.plans.size() && r < a.predicted.ranks.size(); ++r)
    a.plans[r].predicted_step_seconds = a.predicted.ranks[r].step_seconds;
  char line[320];
  std::snprintf(line, sizeof line,
                "the ranks share %d CPUs (unpinned): their compute predicted as a shared span, %.3f x max(slowest, "
                "total CPU work / CPUs), fitted on the profiling world's measured FP32 step",
                s.cpus, s.work_scale);
  a.notes.push_back(line);
  say(std::string("note: ") + line);
}

}  // namespace

nlohmann::json rank_prediction_json(const RankPrediction& p) {
  return {{"step_seconds", p.step_seconds},
          {"compute_seconds", p.compute_seconds},
          {"optimizer_seconds", p.optimizer_seconds},
          {"wait_seconds", p.wait_seconds},
          {"peak_memory_bytes", p.peak_memory_bytes}};
}

LocalPlanning plan_local_job(const JobFile& file, const LocalPlanningInputs& in) {
  const JobSpec& job = file.spec;
  const auto say = [&](const std::string& s) {
    if (in.say) in.say(s);
  };
  const ModelDesc model = model_desc_find(file.model_reference());
  const std::string strategy = in.allocator.empty() ? job.planning.allocator : in.allocator;
  const std::string worker = (fs::path(in.bin_dir) / "qsync-worker").string();
  const std::string logs = (fs::path(in.work_dir) / "logs").string();
  fs::create_directories(logs);
  const std::string profiles = !in.profiles_dir.empty() ? in.profiles_dir
                               : !job.planning.profiles.empty() ? file.resolve(job.planning.profiles)
                                                           : (fs::path(in.work_dir) / "profiles").string();
  fs::create_directories(profiles);

  // Device profiles: one per (class as it runs, local batch), measured on this machine, the way
  // the job will run. With the ranks pinned, every rank of the pool runs a profile on its own
  // CPUs, all at once and as one world that synchronizes its gradients every step as training
  // does (worker/profiler.h): a rank's measured costs then include what its neighbours' load and
  // its own gradient-sync and Gloo threads take from it (measured here: the Gloo I/O thread used
  // 13% of a rank's CPU in a two-rank MLP job; a ViT step on cpu-avx512 took 20.5 ms alone and
  // 28.2 ms beside a cpu-avx2 profile). Ranks whose (class, batch) is already profiled, or
  // profiled by an earlier rank, measure into logs/ only to load the world as the job will.
  // Unpinned ranks (more threads than CPUs, or --no-pin) share the CPUs in the job, so they are
  // profiled the same way: all at once, unpinned. Profiled one at a time, alone, each rank had
  // the machine to itself and the replayer under-predicted every shared pool (measured on 2 CPUs,
  // pools of 3 and 4 ranks, 16 held-out plans: median error -30%, worst -47%; profiled together:
  // median 9.6%, worst 40%, either sign, beside a 10% noise floor). Such a world profiles with
  // --shared-cpus (costs as means; its FP32 step over a block of steps a round: worker/profiler.h).
  std::vector<ProfileNeed> needs = local_missing_profiles(job, model, ProfileStore(profiles));
  if (!in.plans_dir.empty()) {  // given plans run at their own batches on the profiles there are
    const ProfileStore have(profiles);
    std::erase_if(needs, [&](const ProfileNeed& n) {
      return std::any_of(have.measured().begin(), have.measured().end(), [&](const DeviceProfile& p) {
        return p.device_class == n.device_class && p.model_hash == model.hash;
      });
    });
  }
  const std::string world_signature = local_world_signature(job, !in.rank_cpus.empty());
  auto profile_args = [&](const std::string& device_class, int64_t batch, int threads, const std::string& out) {
    std::vector<std::string> args = {worker, "profile", "--model", file.model_reference(), "--device-class", device_class,
                                     "--batch", std::to_string(batch), "--threads", std::to_string(threads),
                                     "--out", out, "--quiet"};
    if (!job.data.path.empty()) args.insert(args.end(), {"--data", job.data.path});
    if (in.profile_rounds > 0) args.insert(args.end(), {"--rounds", std::to_string(in.profile_rounds)});
    if (job.pool.local.size() > 1) args.insert(args.end(), {"--world-signature", world_signature});
    if (job.pool.local.size() > 1 && in.rank_cpus.empty()) args.push_back("--shared-cpus");
    return args;
  };
  auto profile_path = [&](const ProfileNeed& n) {
    return (fs::path(profiles) / device_profile_file_name(model.name, n.device_class, n.batch)).string();
  };
  for (const ProfileNeed& need : needs)
    say("measuring the " + model.name + " profile of " + need.device_class + " at batch " + std::to_string(need.batch) +
        " (once; kept in " + profiles + ")");
  const size_t pool_size = job.pool.local.size();
  std::vector<Measurement> profiling;
  if (!needs.empty() && pool_size > 1) {
    const std::string port = std::to_string(free_loopback_port());
    std::vector<bool> taken(needs.size(), false);
    for (size_t r = 0; r < pool_size; ++r) {
      const LocalWorker& w = job.pool.local[r];
      const std::string device_class = local_run_class(w.device_class);
      const int64_t batch = local_batch_of(job, r);
      std::string out = logs + "/profile-rank-" + std::to_string(r) + ".json";  // load only
      for (size_t k = 0; k < needs.size(); ++k)
        if (!taken[k] && needs[k].device_class == device_class && needs[k].batch == batch) {
          taken[k] = true;
          out = profile_path(needs[k]);
          break;
        }
      Measurement m{profile_args(device_class, batch, int(w.threads), out), logs + "/profile-rank-" + std::to_string(r) + ".log",
                    in.rank_cpus.empty() ? std::vector<int>{} : in.rank_cpus.at(r), -1,
                    {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"RANK", std::to_string(r)},
                     {"WORLD_SIZE", std::to_string(pool_size)}}};
      profiling.push_back(std::move(m));
    }
    try {
      for (Measurement& m : profiling) start_measurement(m);
    } catch (...) {
      finish_measurements(profiling);
      throw;
    }
    finish_measurements(profiling);
  } else {
    for (const ProfileNeed& need : needs) {  // a pool of one: alone
      std::vector<Measurement> one{{profile_args(need.device_class, need.batch, need.threads, profile_path(need)),
                                    logs + "/profile-" + need.device_class + "-b" + std::to_string(need.batch) + ".log",
                                    {}, -1, {}}};
      start_measurement(one.front());
      finish_measurements(one);
    }
  }
  // The all-reduce profile of this world size over loopback.
  const int world = int(job.pool.local.size());
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
  if (in.plans_dir.empty() && strategy_uses_indicator(strategy) && job.planning.calibration.empty()) {
    const std::string stats =
        (fs::path(in.work_dir) / "calibration" / (model.name + "-" + model_hash_suffix(model) + ".json")).string();
    if (!fs::exists(stats)) {
      fs::create_directories(fs::path(stats).parent_path());
      say("collecting calibration statistics of " + model.name + " for the indicator (once; kept in " + stats + ")");
      std::vector<std::string> args = {worker, "calibrate", "--model", file.model_reference(), "--out", stats, "--seed",
                                       std::to_string(job.seed)};
      if (!job.data.path.empty()) args.insert(args.end(), {"--data", job.data.path});
      run_measurement(args, logs + "/calibrate.log");
    }
    options.calibration = stats;
  }

  const LocalPlanRequest request = local_plan_request(file, ProfileStore(profiles), options);
  for (const std::string& n : request.notes) say("note: " + n);
  LocalPlanning out;
  // Pools sharing the CPUs plan in the replay's units: a step target the user set is divided by
  // the uniform plan's ratio (SharedCpus::uniform_ratio); the predictions are then the shared
  // model's.
  const bool shares_cpus = pool_size > 1 && in.rank_cpus.empty();
  const std::optional<SharedCpus> shared =
      shares_cpus ? shared_cpus_of(job, request.request, world_signature, say) : std::nullopt;
  AllocationRequest req = request.request;
  if (req.step_time_target > 0 && shared) req.step_time_target /= shared->uniform_ratio;
  out.allocation = in.plans_dir.empty() ? allocate(req, request.strategy) : replay_given_plans(req, in.plans_dir);
  if (shared) share_allocation_cpus(out.allocation, *shared, say);
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
