// File: runner/local_runner.cpp
// Spawning, watching and summarizing the worker processes of a local job.
#include "runner/local_runner.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "planner/worker_command.h"
#include "runner/child_process.h"
#include "runner/cpu_pinning.h"
#include "runner/local_job_check.h"
#include "runner/local_planning.h"
#include "runner/run_progress.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;
std::atomic<int> interrupt_signal{0};
extern "C" void on_interrupt(int sig) { interrupt_signal.store(sig); }

std::string default_worker_binary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (ec ? fs::path("qsync-worker") : self.parent_path() / "qsync-worker").string();
}

std::string tail_of(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  std::string buffer, log_path, summary_path;
  bool exited = false;
  bool killed_by_runner = false;  // SIGKILLed past the collective timeout
  int exit_code = -1;
};

// argv of rank r's qsync-worker: the job's one command line (planner/worker_command.h) with this
// machine's paths.
std::vector<std::string> worker_args(const RunOptions& o, const JobFile& j, const LocalWorker& w, int rank,
                                     const std::string& device_class, const std::string& plan, const std::string& ckpt,
                                     const std::string& summary) {
  WorkerLaunch l;
  l.binary = o.worker_binary;
  l.model = j.model_reference();
  l.data = j.spec.data.path;
  l.plan_file = plan;
  l.device_class = device_class;
  l.threads = w.threads;
  l.memory_budget_bytes = w.memory_budget_bytes;
  l.checkpoint_dir = ckpt;
  l.resume = o.resume;
  l.metrics_port = o.metrics_base_port > 0 ? o.metrics_base_port + rank : 0;
  l.summary_json = summary;
  l.collective_timeout_seconds = o.collective_timeout_seconds;
  l.log_every = 1;
  return worker_train_command(j.name, j.spec, l);
}

}  // namespace

std::string default_work_dir(const std::string& job_path) { return "qsync-runs/" + job_file_load(job_path).name; }

int rank_that_failed_first(const std::vector<ReapedFailure>& failed) {
  for (const ReapedFailure& f : failed)
    if (f.exit_code != WORKER_EXIT_COLLECTIVE_FAILED && !f.killed_by_runner) return f.rank;
  return failed.empty() ? -1 : failed.front().rank;
}

namespace {

// Each rank on CPUs of its own (cpu_pinning.h), said on the progress; the profiles are measured on
// them too. None when not pinning.
CpuAssignment pin_local_ranks(const JobFile& job, const RunOptions& o, RunProgress& progress) {
  CpuAssignment cpus;
  if (!o.pin_cpus) return cpus;
  std::vector<int> threads;
  for (const LocalWorker& w : job.spec.pool.local) threads.push_back(int(w.threads));
  cpus = assign_rank_cpus(threads, affinity_cpus());
  if (!cpus.note.empty()) progress.message("note: " + cpus.note);
  std::string pinned;
  for (size_t r = 0; r < cpus.per_rank.size(); ++r)
    pinned += std::string(r ? ", " : "") + "rank " + std::to_string(r) + " on CPU " + cpu_list_string(cpus.per_rank[r]);
  if (!pinned.empty()) progress.message("pinned: " + pinned);
  return cpus;
}

void say_plan(const LocalPlanning& planning, RunProgress& progress) {
  char line[256];
  std::snprintf(line, sizeof line, "plan: %s, predicted step %.1f ms (target %.1f ms, %s), indicator %s",
                planning.allocation.strategy.c_str(), planning.allocation.predicted.step_seconds * 1e3,
                planning.allocation.step_time_target * 1e3, planning.allocation.meets_target ? "met" : "NOT met",
                planning.summary["indicator"].get<std::string>().c_str());
  progress.message(line);
  for (const std::string& n : planning.allocation.notes) progress.message("plan note: " + n);
}

// What the ranks of a local job share when they start.
struct LocalLaunch {
  const RunOptions& o;
  const JobFile& job;
  const LocalJobCheck& checked;
  const LocalPlanning& planning;
  const CpuAssignment& cpus;
  std::string ckpt;  // the job's checkpoint directory, resolved ("" for none)
  int port;          // the rendezvous port on 127.0.0.1
};

// Writes rank r's plan file and starts its worker (stdout into a pipe the runner reads, stderr
// to its log); what the job summary reports of the rank.
RankOutcome start_rank(const LocalLaunch& l, int r, Worker& wk, RunProgress& progress) {
  const RunOptions& o = l.o;
  const LocalWorker& w = l.job.spec.pool.local[size_t(r)];
  const int world = int(l.job.spec.pool.local.size());
  RankOutcome outcome;
  outcome.rank = r;
  outcome.requested_class = w.device_class;
  const DeviceClass& c = device_class_fallback(*l.checked.classes[size_t(r)]);
  outcome.device_class = c.name;
  if (c.name != w.device_class) {
    outcome.note = device_class_availability(*l.checked.classes[size_t(r)]).note;
    progress.message("note: rank " + std::to_string(r) + ": " + outcome.note + "; running it as " + c.name);
  }
  RankPlan plan = l.planning.allocation.plans[size_t(r)];
  plan.rank = r;
  plan.device_class = c.name;
  plan.model_hash = l.checked.model.hash;
  outcome.predicted = rank_prediction_json(l.planning.allocation.predicted.ranks[size_t(r)]);
  const std::vector<int> rank_cpus = l.cpus.per_rank.empty() ? std::vector<int>() : l.cpus.per_rank[size_t(r)];
  outcome.cpus = rank_cpus.empty() ? "" : cpu_list_string(rank_cpus);
  const std::string plan_path = (fs::path(o.work_dir) / "plans" / ("rank-" + std::to_string(r) + ".yaml")).string();
  plan_file_write(plan_path, plan);
  wk.rank = r;
  wk.log_path = (fs::path(o.work_dir) / "logs" / ("rank-" + std::to_string(r) + ".log")).string();
  wk.summary_path = (fs::path(o.work_dir) / "summaries" / ("rank-" + std::to_string(r) + ".json")).string();
  fs::remove(wk.summary_path);
  int fds[2];
  // Close-on-exec: each worker keeps only its own end (as its stdout), not its peers' pipes.
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  wk.pid = spawn_child(worker_args(o, l.job, w, r, c.name, plan_path, l.ckpt, wk.summary_path),
                       {{"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", std::to_string(l.port)},
                        {"RANK", std::to_string(r)},
                        {"WORLD_SIZE", std::to_string(world)}},
                       wk.log_path, fds[1], rank_cpus);
  close(fds[1]);
  wk.out_fd = fds[0];
  return outcome;
}

// The workers' stdout lines that have arrived, to the progress; a closed pipe is closed here.
void drain_worker_output(std::vector<Worker>& workers, RunProgress& progress) {
  std::vector<pollfd> fds;
  for (const Worker& w : workers)
    if (w.out_fd >= 0) fds.push_back({w.out_fd, POLLIN, 0});
  if (!fds.empty()) poll(fds.data(), fds.size(), 200);
  for (Worker& w : workers) {
    if (w.out_fd < 0) continue;
    char buf[4096];
    pollfd p{w.out_fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) continue;
    const ssize_t n = read(w.out_fd, buf, sizeof buf);
    if (n <= 0) {
      close(w.out_fd);
      w.out_fd = -1;
      continue;
    }
    w.buffer.append(buf, size_t(n));
    for (size_t nl; (nl = w.buffer.find('\n')) != std::string::npos;) {
      progress.line(w.rank, w.buffer.substr(0, nl));
      w.buffer.erase(0, nl + 1);
    }
  }
}

// How the watch of a job's workers ended.
struct WatchEnd {
  std::vector<int> failed;  // ranks that exited non-zero, in the order they were reaped
  bool forwarded = false;   // an interrupt was forwarded to the workers as SIGTERM
};

// Until every worker has exited and closed its output: their lines to the progress, SIGINT or
// SIGTERM to the runner forwarded as SIGTERM (they checkpoint and stop), and after a failure the
// peers still running past the collective timeout (plus grace) killed.
WatchEnd watch_workers(std::vector<Worker>& workers, double collective_timeout_seconds, RunProgress& progress) {
  interrupt_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  WatchEnd end;
  auto failure_time = std::chrono::steady_clock::time_point{};
  for (;;) {
    drain_worker_output(workers, progress);
    if (interrupt_signal.load() != 0 && !end.forwarded) {
      end.forwarded = true;
      progress.message("interrupted: asking the workers to checkpoint and stop");
      for (const Worker& w : workers)
        if (!w.exited) kill(w.pid, SIGTERM);
    }
    bool all_exited = true;
    for (Worker& w : workers) {
      int status = 0;
      if (!w.exited && waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.exited = true;
        w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (w.exit_code != 0) {
          if (end.failed.empty()) failure_time = std::chrono::steady_clock::now();
          end.failed.push_back(w.rank);
        }
      }
      all_exited = all_exited && w.exited && w.out_fd < 0;
    }
    if (all_exited) break;
    if (!end.failed.empty() && std::chrono::steady_clock::now() - failure_time >
                                   std::chrono::duration<double>(collective_timeout_seconds + 10))
      for (Worker& w : workers)
        if (!w.exited) {
          kill(w.pid, SIGKILL);
          w.killed_by_runner = true;
        }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return end;
}

}  // namespace

RunResult run_job_locally(const RunOptions& in) {
  RunOptions o = in;
  JobFile job = job_file_load(o.job_path);
  if (o.steps > 0) {
    job.spec.steps = o.steps;
    job.spec.epochs.reset();
  }
  if (!o.checkpoints) job.spec.checkpoint.dir.clear();
  // Everything a user can get wrong is refused here, before any profile, calibration or worker
  // (a bad class found while spawning would leave the started ranks waiting at the rendezvous).
  const LocalJobCheck checked = check_local_job(job);
  if (o.work_dir.empty()) o.work_dir = "qsync-runs/" + job.name;
  if (o.worker_binary.empty()) o.worker_binary = default_worker_binary();
  if (!fs::exists(o.worker_binary)) throw std::runtime_error("worker binary " + o.worker_binary + " not found: build it first");
  const int world = int(job.spec.pool.local.size());
  for (const char* sub : {"plans", "logs", "summaries"}) fs::create_directories(fs::path(o.work_dir) / sub);
  const std::string& ckpt_dir = job.spec.checkpoint.dir;
  const std::string ckpt = ckpt_dir.empty() ? ""
                           : fs::path(ckpt_dir).is_absolute() ? ckpt_dir
                                                              : (fs::path(o.work_dir) / ckpt_dir).string();
  const int port = o.master_port > 0 ? o.master_port : free_loopback_port();

  RunResult result;
  std::vector<Worker> workers(static_cast<size_t>(world));
  RunProgress progress(!o.quiet, world);
  LocalPlanningInputs planning_inputs;
  planning_inputs.work_dir = o.work_dir;
  planning_inputs.bin_dir = fs::path(o.worker_binary).parent_path().string();
  planning_inputs.allocator = o.allocator;
  planning_inputs.profiles_dir = o.profiles_dir;
  planning_inputs.plans_dir = o.plans_dir;
  planning_inputs.profile_rounds = o.profile_rounds;
  planning_inputs.say = [&](const std::string& m) { progress.message(m); };
  const CpuAssignment cpus = pin_local_ranks(job, o, progress);
  planning_inputs.rank_cpus = cpus.per_rank;
  const LocalPlanning planning = plan_local_job(job, planning_inputs);
  result.plan = planning.summary;
  say_plan(planning, progress);
  const LocalLaunch launch{o, job, checked, planning, cpus, ckpt, port};
  for (int r = 0; r < world; ++r) result.ranks.push_back(start_rank(launch, r, workers[size_t(r)], progress));
  progress.message("started " + std::to_string(world) + " workers (job " + job.name + ", rendezvous 127.0.0.1:" +
                   std::to_string(port) + "; logs in " + o.work_dir + "/logs)");

  const WatchEnd end = watch_workers(workers, o.collective_timeout_seconds, progress);
  std::vector<ReapedFailure> reaped;
  for (int r : end.failed) reaped.push_back({r, workers[size_t(r)].exit_code, workers[size_t(r)].killed_by_runner});
  const int first_failure = rank_that_failed_first(reaped);
  progress.finish();

  for (size_t r = 0; r < workers.size(); ++r) {
    RankOutcome& out = result.ranks[r];
    out.exit_code = workers[r].exit_code;
    if (out.exit_code != 0) out.error = tail_of(workers[r].log_path, 5);
    std::ifstream s(workers[r].summary_path);
    if (s) out.summary = nlohmann::json::parse(s, nullptr, false);
  }
  result.exit_code = first_failure >= 0 ? 1 : end.forwarded ? 130 : 0;
  result.summary = run_summary_json(job, result.ranks, first_failure);
  result.summary["plan"] = result.plan;
  result.summary["evals"] = progress.evals();
  if (!o.summary_json.empty()) atomic_file_write(o.summary_json, result.summary.dump(2) + "\n");
  return result;
}

}  // namespace qsync
