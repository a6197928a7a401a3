// File: tests/e2e/runner_faults_test.cpp
// Faults injected into a running local pool (`qsync run`, two one-thread qsync-worker ranks of
// the zoo MLP, a checkpoint every 5 steps): a rank killed with SIGKILL at a random step, a rank
// stopped (SIGSTOP) past the collective timeout, a checkpoint disk that fills up (a small tmpfs
// mounted over the checkpoint folder; skipped where mounting is not allowed), a corrupt or
// half-written newest checkpoint (the resume falls back to the kept one before it) or every kept
// checkpoint damaged, a profile measurement killed while planning, and a rendezvous
// delayed (rank 0 stopped while rank 1 waits for it) or dropped (rank 0 killed during it). Each ends in a clear state: the job fails naming
// the rank and the cause and leaves no worker behind, and --resume continues from the last good
// checkpoint (which no fault may lose or leave half-written); a delayed rendezvous still
// succeeds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/process.h"
#include "tests/e2e/runner_run.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;
using namespace runner_e2e;

// The runner's children by rank (RANK= in their environment), read from /proc.
std::map<int, pid_t> worker_pids(pid_t runner) {
  std::map<int, pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &ppid) != 2 || ppid != runner) continue;
    std::ifstream env(entry.path() / "environ", std::ios::binary);
    std::string vars((std::istreambuf_iterator<char>(env)), {});
    for (size_t at = 0; at < vars.size(); at = vars.find('\0', at) + 1) {
      if (vars.compare(at, 5, "RANK=") == 0) out[std::atoi(vars.c_str() + at + 5)] = pid_t(std::stol(name));
      if (vars.find('\0', at) == std::string::npos) break;
    }
  }
  return out;
}

// The two training ranks once the runner has started them (before that, its children are the
// profile measurements).
std::map<int, pid_t> training_workers(Process& runner) {
  if (runner.out().find("started 2 workers") == std::string::npos) return {};
  return worker_pids(runner.pid());
}

// Gone: no such process, or a zombie nobody waits for any more.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t close = text.rfind(')');
  return text.empty() || close == std::string::npos || (close + 2 < text.size() && text[close + 2] == 'Z');
}

std::string rank_log(const TempDir& dir, int rank) { return dir.file("work/logs/rank-" + std::to_string(rank) + ".log"); }

// Files a crashed atomic write could leave beside the checkpoint.
std::vector<std::string> temp_leftovers(const TempDir& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir.file("work/checkpoints"), ec))
    if (f.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(f.path().string());
  return out;
}

// Starts the 60-step job (25-50 ms a step on the machines seen so far) and waits for its first
// checkpoint (step 5), then a random 0-0.6 s more: the fault lands at a random step between 5 and
// about 30, well before the end (with 1.5 s a Zen 5 machine finished all 60 steps first).
struct RunningJob {
  Process runner;
  std::map<int, pid_t> pids;
};
RunningJob start_job_past_first_checkpoint(const TempDir& dir, const std::string& job, const std::vector<std::string>& extra) {
  RunningJob j{start_runner(dir, job, extra, "faulted"), {}};
  const std::string ckpt = dir.file("work/checkpoints/latest.qckpt");
  EXPECT_TRUE(test::poll_until([&] { return fs::exists(ckpt) || !j.runner.running(); }, 90s));
  std::random_device rd;
  const int delay_ms = std::uniform_int_distribution<int>(0, 600)(rd);
  std::printf("fault injected %d ms after the first checkpoint\n", delay_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  j.pids = worker_pids(j.runner.pid());
  return j;
}

// The job failed in a clear state: exit 1, the runner names `needles`, no worker left behind,
// no half-written checkpoint beside the last good one.
RunnerRun expect_failed_cleanly(const TempDir& dir, RunningJob& j, const std::vector<std::string>& needles,
                                std::chrono::seconds limit) {
  const RunnerRun r = finish_runner(j.runner, dir, "faulted", limit);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.summary.value("succeeded", true), false) << r.summary.dump(2);
  const std::string said = r.out + r.err;
  for (const std::string& n : needles) EXPECT_NE(said.find(n), std::string::npos) << "'" << n << "' in:\n" << said;
  for (const auto& [rank, pid] : j.pids) EXPECT_TRUE(process_gone(pid)) << "rank " << rank << " (pid " << pid << ") outlived the job";
  EXPECT_TRUE(temp_leftovers(dir).empty()) << temp_leftovers(dir).front();
  EXPECT_TRUE(fs::exists(dir.file("work/checkpoints/latest.qckpt"))) << "the last good checkpoint was lost";
  return r;
}

// --resume finishes the 60 steps from a checkpoint at a multiple of 5 in [5, at_most].
void expect_resumes(const TempDir& dir, const std::string& job, int64_t at_most) {
  const RunnerRun resumed = run_runner(dir, job, {"--resume"}, "resumed");
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(resumed.summary["steps"], 60);
  const int64_t start = rank_summary(dir, 0).value("start_step", int64_t(-1));
  EXPECT_GE(start, 5);
  EXPECT_LE(start, at_most);
  EXPECT_EQ(start % 5, 0) << "resumed from step " << start << ", not a checkpoint";
  EXPECT_EQ(rank_summary(dir, 1).value("start_step", int64_t(-1)), start);
}

TEST(RunnerFaults, RankKilledAtARandomStepFailsNamingItAndResumeFinishes) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(60));
  RunningJob j = start_job_past_first_checkpoint(dir, job, {});
  ASSERT_EQ(j.pids.size(), 2u) << "the job ended before the fault:\n" << j.runner.out() << j.runner.err();
  ::kill(j.pids[1], SIGKILL);
  const RunnerRun r = expect_failed_cleanly(dir, j, {"failed first"}, 60s);
  ASSERT_TRUE(r.summary["ranks"].is_array()) << r.summary.dump(2);
  EXPECT_EQ(r.summary["ranks"][1]["exit_code"], 128 + SIGKILL) << "the summary names rank 1's death";
  expect_resumes(dir, job, 55);
}

TEST(RunnerFaults, RankStoppedPastTheCollectiveTimeoutFailsTheJobAndLeavesNoWorker) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(60));
  RunningJob j = start_job_past_first_checkpoint(dir, job, {"--collective-timeout", "5"});
  ASSERT_EQ(j.pids.size(), 2u) << "the job ended before the fault:\n" << j.runner.out() << j.runner.err();
  ::kill(j.pids[1], SIGSTOP);  // the runner must not wait for it: rank 0 times out, the runner kills it
  const auto t0 = std::chrono::steady_clock::now();
  const RunnerRun r = expect_failed_cleanly(dir, j, {"rank 0 failed first", "timeout 5 s", "Timed out"}, 60s);
  EXPECT_EQ(r.summary["ranks"][1]["exit_code"], 128 + SIGKILL) << "the stopped rank is killed, not left behind";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 50s) << "the job outlived the 5 s collective timeout by far";
  expect_resumes(dir, job, 55);
}

TEST(RunnerFaults, FullCheckpointDiskFailsNamingItAndKeepsTheLastCheckpoint) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(60));
  const std::string ckpt_dir = dir.file("work/checkpoints");
  fs::create_directories(ckpt_dir);
  if (::mount("tmpfs", ckpt_dir.c_str(), "tmpfs", 0, "size=256m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root or CAP_SYS_ADMIN";
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{ckpt_dir};
  const std::string ckpt = ckpt_dir + "/latest.qckpt";
  Process runner = start_runner(dir, job, {}, "faulted");
  ASSERT_TRUE(test::poll_until([&] { return fs::exists(ckpt) || !runner.running(); }, 90s));
  ASSERT_TRUE(runner.running()) << runner.out() << runner.err();
  // Room for the checkpoint there (step-5.qckpt, latest.qckpt its hard link) and a third of
  // another: the next save (step-10.qckpt) runs out of space.
  const uintmax_t size = fs::file_size(ckpt);
  const std::string shrink = "size=" + std::to_string((size + size / 3) / 4096 * 4096);
  ASSERT_EQ(::mount("tmpfs", ckpt_dir.c_str(), "tmpfs", MS_REMOUNT, shrink.c_str()), 0) << std::strerror(errno);
  std::map<int, pid_t> pids = worker_pids(runner.pid());
  RunningJob j{std::move(runner), pids};
  expect_failed_cleanly(dir, j, {"rank 0 failed first", "No space left on device", "step-10.qckpt"}, 90s);
  // Free the space (the kept checkpoints move to a roomy disk) and resume from them.
  std::map<std::string, std::string> kept;
  for (const auto& f : fs::directory_iterator(ckpt_dir)) kept[f.path().filename().string()] = test::read_text(f.path().string());
  ASSERT_EQ(kept.size(), 2u) << "latest.qckpt and step-5.qckpt, nothing else";
  ASSERT_EQ(kept["step-5.qckpt"].size(), size) << "the last good checkpoint changed";
  ASSERT_EQ(kept["latest.qckpt"], kept["step-5.qckpt"]);
  ASSERT_EQ(::umount(ckpt_dir.c_str()), 0) << std::strerror(errno);
  for (const auto& [name, bytes] : kept) std::ofstream(ckpt_dir + "/" + name, std::ios::binary) << bytes;
  expect_resumes(dir, job, 55);
}

// What the runner and the ranks' logs said.
std::string everything_said(const TempDir& dir, const RunnerRun& r) {
  return r.out + r.err + test::read_text(rank_log(dir, 0)) + test::read_text(rank_log(dir, 1));
}

// A finished 10-step job (checkpoints step-5.qckpt and step-10.qckpt kept) whose newest
// checkpoint is then damaged in place (latest.qckpt, its second name, with it): --resume warns
// naming the file and the cause, both ranks resume from step 5 and finish the 10 steps.
void expect_damaged_newest_checkpoint_skipped(const std::function<void(std::string&)>& damage, const std::string& cause) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(10));
  const RunnerRun first = run_runner(dir, job);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const std::string newest = dir.file("work/checkpoints/step-10.qckpt");
  const std::string good = test::read_text(dir.file("work/checkpoints/step-5.qckpt"));
  std::string bytes = test::read_text(newest);
  ASSERT_GT(bytes.size(), 1000u);
  ASSERT_EQ(test::read_text(dir.file("work/checkpoints/latest.qckpt")), bytes);
  damage(bytes);
  std::ofstream(newest, std::ios::binary | std::ios::trunc) << bytes;
  const RunnerRun r = run_runner(dir, job, {"--resume"}, "resumed");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.summary["steps"], 10);
  EXPECT_EQ(rank_summary(dir, 0).value("start_step", int64_t(-1)), 5);
  EXPECT_EQ(rank_summary(dir, 1).value("start_step", int64_t(-1)), 5);
  const std::string said = everything_said(dir, r);
  for (const std::string& n : {cause, newest, std::string("trying the next older checkpoint"),
                               std::string("resumed from ") + dir.file("work/checkpoints/step-5.qckpt")})
    EXPECT_NE(said.find(n), std::string::npos) << "'" << n << "' in:\n" << said;
  // The resumed run wrote step 10 again: a whole checkpoint, step 5 kept beside it.
  EXPECT_EQ(test::read_text(newest).size(), good.size());
  EXPECT_EQ(test::read_text(dir.file("work/checkpoints/step-5.qckpt")), good);
  EXPECT_TRUE(temp_leftovers(dir).empty());
}

TEST(RunnerFaults, CorruptNewestCheckpointResumesFromThePreviousOne) {
  expect_damaged_newest_checkpoint_skipped([](std::string& b) { b[b.size() / 2] = char(b[b.size() / 2] ^ 0x5a); },
                                           "checksum mismatch");
}

TEST(RunnerFaults, HalfWrittenNewestCheckpointResumesFromThePreviousOne) {
  expect_damaged_newest_checkpoint_skipped([](std::string& b) { b.resize(b.size() / 2); }, "truncated");
}

// Both kept checkpoints damaged: --resume fails at once naming each file and its cause, and
// leaves them as they were (nothing overwritten or deleted: they are the operator's to judge).
TEST(RunnerFaults, EveryCheckpointDamagedIsRefusedNamingEachFile) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(10));
  const RunnerRun first = run_runner(dir, job);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const std::string newest = dir.file("work/checkpoints/step-10.qckpt"), older = dir.file("work/checkpoints/step-5.qckpt");
  std::string corrupt = test::read_text(newest), cut = test::read_text(older);
  corrupt[corrupt.size() / 2] = char(corrupt[corrupt.size() / 2] ^ 0x5a);
  cut.resize(cut.size() / 2);
  std::ofstream(newest, std::ios::binary | std::ios::trunc) << corrupt;
  std::ofstream(older, std::ios::binary | std::ios::trunc) << cut;
  const auto t0 = std::chrono::steady_clock::now();
  const RunnerRun r = run_runner(dir, job, {"--resume"}, "resumed");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  const std::string said = everything_said(dir, r);
  for (const std::string& n : {newest + " is corrupt (checksum mismatch)", older + " is truncated",
                               std::string("no checkpoint in"), std::string("rank 0")})
    EXPECT_NE(said.find(n), std::string::npos) << "'" << n << "' in:\n" << said;
  EXPECT_EQ(test::read_text(newest), corrupt) << "the damaged checkpoint was changed instead of left for the operator";
  EXPECT_EQ(test::read_text(older), cut);
}

// Rank 0 (the rendezvous store) stopped for 3 s as soon as it starts: rank 1 waits for it and
// the job succeeds.
TEST(RunnerFaults, DelayedRendezvousStillSucceeds) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(10));
  Process runner = start_runner(dir, job, {"--collective-timeout", "20"}, "delayed");
  std::map<int, pid_t> pids;
  ASSERT_TRUE(test::poll_until([&] { return (pids = training_workers(runner)).size() == 2 || !runner.running(); }, 60s));
  ASSERT_EQ(pids.size(), 2u) << runner.out() << runner.err();
  ::kill(pids[0], SIGSTOP);
  std::this_thread::sleep_for(3s);
  ::kill(pids[0], SIGCONT);
  const RunnerRun r = finish_runner(runner, dir, "delayed", 90s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.summary["steps"], 10);
}

// Rank 0 killed before its first step: the rendezvous is lost; rank 1 fails within the timeout
// naming the master it lost, the runner names rank 0, and nothing is left running.
TEST(RunnerFaults, DroppedRendezvousFailsNamingTheMaster) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(10));
  Process runner = start_runner(dir, job, {"--collective-timeout", "5"}, "faulted");
  std::map<int, pid_t> pids;
  ASSERT_TRUE(test::poll_until([&] { return (pids = training_workers(runner)).size() == 2 || !runner.running(); }, 60s));
  ASSERT_EQ(pids.size(), 2u) << runner.out() << runner.err();
  ::kill(pids[0], SIGKILL);
  RunningJob j{std::move(runner), pids};
  const RunnerRun r = finish_runner(j.runner, dir, "faulted", 60s);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("rank 0"), std::string::npos) << r.out << r.err;
  const std::string rank1 = test::read_text(rank_log(dir, 1));
  EXPECT_NE(rank1.find("rendezvous"), std::string::npos) << "rank 1 does not name the rendezvous it lost:\n" << rank1;
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "rank " << rank << " outlived the job";
}

// A profile measurement killed while `qsync run` plans (the ranks' profiles run as one joined
// pool): the runner fails at once naming the measurement and its log, instead of waiting for
// the other profiler's collective timeout, and leaves no profiler running.
TEST(RunnerFaults, KilledProfileMeasurementFailsPlanningAtOnce) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(10));
  Process runner = start_runner(dir, job, {}, "faulted");
  std::map<int, pid_t> pids;
  ASSERT_TRUE(test::poll_until([&] { return (pids = worker_pids(runner.pid())).size() == 2 || !runner.running(); }, 60s));
  ASSERT_EQ(pids.size(), 2u) << runner.out() << runner.err();
  ASSERT_EQ(runner.out().find("started 2 workers"), std::string::npos) << "training began before the fault";
  ::kill(pids[0], SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const RunnerRun r = finish_runner(runner, dir, "faulted", 60s);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "the runner waited for the other profiler's timeout";
  EXPECT_NE(r.err.find("planning measurement failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
  for (const auto& [rank, pid] : pids) EXPECT_TRUE(process_gone(pid)) << "profiler " << rank << " outlived the run";
}

}  // namespace
}  // namespace qsync
