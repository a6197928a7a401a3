// File: runner/local_planning.cpp
// Measuring what the planner lacks, then planning the local pool (see local_planning.h).
#include "runner/local_planning.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/allocator_model.h"
#include "planner/local_plan.h"
#include "planner/replayer.h"
#include "planner/shared_cpu_model.h"
#include "runner/cpu_pinning.h"
#include "runner/local_measurements.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

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

  const std::string world_signature = local_world_signature(job, !in.rank_cpus.empty());
  const LocalMeasuring measuring{file, in, model, worker, logs, profiles, world_signature, say};
  measure_missing_profiles(measuring);
  measure_comm_profile(measuring);
  LocalPlanOptions options;
  options.strategy = strategy;
  options.calibration = calibration_statistics(measuring, strategy);

  const LocalPlanRequest request = local_plan_request(file, ProfileStore(profiles), options);
  for (const std::string& n : request.notes) say("note: " + n);
  LocalPlanning out;
  // Pools sharing the CPUs plan in the replay's units: a step target the user set is divided by
  // the uniform plan's ratio (SharedCpus::uniform_ratio); the predictions are then the shared
  // model's.
  const bool shares_cpus = job.pool.local.size() > 1 && in.rank_cpus.empty();
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
