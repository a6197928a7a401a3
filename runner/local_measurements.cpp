// File: runner/local_measurements.cpp
// The planner's measurements of a local pool (see local_measurements.h).
#include "runner/local_measurements.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include "planner/device_profile.h"
#include "planner/local_plan.h"
#include "runner/child_process.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

struct Measurement {
  std::vector<std::string> args;
  std::string log;
  std::vector<int> cpus;  // pinned there (empty: not pinned)
  pid_t pid = -1;
  ChildEnv env;  // set in the child
};

// Starts m.args with stdout and stderr to m.log, on m.cpus.
void start_measurement(Measurement& m) { m.pid = spawn_child(m.args, m.env, m.log, -1, m.cpus); }

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

namespace {

// `qsync-worker profile` of a class at a local batch, for this pool's world.
std::vector<std::string> profile_args(const LocalMeasuring& m, const std::string& device_class, int64_t batch,
                                      int threads, const std::string& out) {
  const JobSpec& job = m.file.spec;
  std::vector<std::string> args = {m.worker, "profile", "--model", m.file.model_reference(), "--device-class",
                                   device_class, "--batch", std::to_string(batch), "--threads", std::to_string(threads),
                                   "--out", out, "--quiet"};
  if (!job.data.path.empty()) args.insert(args.end(), {"--data", job.data.path});
  if (m.in.profile_rounds > 0) args.insert(args.end(), {"--rounds", std::to_string(m.in.profile_rounds)});
  if (job.pool.local.size() > 1) args.insert(args.end(), {"--world-signature", m.world_signature});
  if (job.pool.local.size() > 1 && m.in.rank_cpus.empty()) args.push_back("--shared-cpus");
  return args;
}

std::string profile_path(const LocalMeasuring& m, const ProfileNeed& n) {
  return (fs::path(m.profiles) / device_profile_file_name(m.model.name, n.device_class, n.batch)).string();
}

// Every rank of the pool profiles at once, as one world; a rank whose (class, batch) is not
// needed, or taken by an earlier rank, writes into logs/ only.
void profile_pool_world(const LocalMeasuring& m, const std::vector<ProfileNeed>& needs) {
  const JobSpec& job = m.file.spec;
  const size_t pool_size = job.pool.local.size();
  const std::string port = std::to_string(free_loopback_port());
  std::vector<bool> taken(needs.size(), false);
  std::vector<Measurement> profiling;
  for (size_t r = 0; r < pool_size; ++r) {
    const LocalWorker& w = job.pool.local[r];
    const std::string device_class = local_run_class(w.device_class);
    const int64_t batch = local_batch_of(job, r);
    std::string out = m.logs + "/profile-rank-" + std::to_string(r) + ".json";  // load only
    for (size_t k = 0; k < needs.size(); ++k)
      if (!taken[k] && needs[k].device_class == device_class && needs[k].batch == batch) {
        taken[k] = true;
        out = profile_path(m, needs[k]);
        break;
      }
    profiling.push_back({profile_args(m, device_class, batch, int(w.threads), out),
                         m.logs + "/profile-rank-" + std::to_string(r) + ".log",
                         m.in.rank_cpus.empty() ? std::vector<int>{} : m.in.rank_cpus.at(r), -1,
                         {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"RANK", std::to_string(r)},
                          {"WORLD_SIZE", std::to_string(pool_size)}}});
  }
  try {
    for (Measurement& p : profiling) start_measurement(p);
  } catch (...) {
    finish_measurements(profiling);
    throw;
  }
  finish_measurements(profiling);
}

}  // namespace

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
void measure_missing_profiles(const LocalMeasuring& m) {
  const JobSpec& job = m.file.spec;
  std::vector<ProfileNeed> needs = local_missing_profiles(job, m.model, ProfileStore(m.profiles));
  if (!m.in.plans_dir.empty()) {  // given plans run at their own batches on the profiles there are
    const ProfileStore have(m.profiles);
    std::erase_if(needs, [&](const ProfileNeed& n) {
      return std::any_of(have.measured().begin(), have.measured().end(), [&](const DeviceProfile& p) {
        return p.device_class == n.device_class && p.model_hash == m.model.hash;
      });
    });
  }
  for (const ProfileNeed& need : needs)
    m.say("measuring the " + m.model.name + " profile of " + need.device_class + " at batch " +
          std::to_string(need.batch) + " (once; kept in " + m.profiles + ")");
  if (needs.empty()) return;
  if (job.pool.local.size() > 1) return profile_pool_world(m, needs);
  for (const ProfileNeed& need : needs) {  // a pool of one: alone
    std::vector<Measurement> one{{profile_args(m, need.device_class, need.batch, need.threads, profile_path(m, need)),
                                  m.logs + "/profile-" + need.device_class + "-b" + std::to_string(need.batch) + ".log",
                                  {}, -1, {}}};
    start_measurement(one.front());
    finish_measurements(one);
  }
}

void measure_comm_profile(const LocalMeasuring& m) {
  const int world = int(m.file.spec.pool.local.size());
  const std::string comm = (fs::path(m.profiles) / ("comm-w" + std::to_string(world) + ".json")).string();
  const std::string comm_bench = (fs::path(m.in.bin_dir) / "qsync-bench-allreduce").string();
  if (world < 2 || fs::exists(comm) || !fs::exists(comm_bench)) return;
  m.say("measuring the all-reduce of " + std::to_string(world) + " local ranks (once; kept in " + m.profiles + ")");
  run_measurement(
      {comm_bench, "--ranks", std::to_string(world), "--reps", "9", "--max-mib", "16", "--comm-profile", comm},
      m.logs + "/comm-profile.log");
}

std::string calibration_statistics(const LocalMeasuring& m, const std::string& strategy) {
  const JobSpec& job = m.file.spec;
  if (!m.in.plans_dir.empty() || !strategy_uses_indicator(strategy) || !job.planning.calibration.empty()) return "";
  const std::string stats =
      (fs::path(m.in.work_dir) / "calibration" / (m.model.name + "-" + model_hash_suffix(m.model) + ".json")).string();
  if (!fs::exists(stats)) {
    fs::create_directories(fs::path(stats).parent_path());
    m.say("collecting calibration statistics of " + m.model.name + " for the indicator (once; kept in " + stats + ")");
    std::vector<std::string> args = {m.worker, "calibrate", "--model", m.file.model_reference(), "--out", stats};
    args.insert(args.end(), {"--seed", std::to_string(job.seed)});
    if (!job.data.path.empty()) args.insert(args.end(), {"--data", job.data.path});
    run_measurement(args, m.logs + "/calibrate.log");
  }
  return stats;
}

}  // namespace qsync
