// File: tests/e2e/data_parallel_test.cpp
// End-to-end data parallelism of qsync-worker: ranks run as separate processes (fork+exec, the
// rendezvous variables, 127.0.0.1 and a free port) and are compared with one rank training the
// same global batch: 2 even ranks and 3 uneven ranks (64/32/32 via per-rank plans) give the same
// loss curve and final weights (read back from the checkpoint) as one rank; fp32 and int8 ranks
// keep bit-identical weights; ranks started with other settings fail fast; a rank killed with
// SIGKILL makes its peer fail within the collective timeout, and --resume from the last
// checkpoint finishes the job with the losses of an uninterrupted run, bit for bit.
//
// Every run is the zoo MLP, 20 steps, one thread per rank, 50 evaluation samples.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "tests/e2e/process.h"
#include "worker/checkpoint.h"
#include "worker/model.h"
#include "worker/optimizer.h"

#ifndef QSYNC_WORKER_BIN
#error "QSYNC_WORKER_BIN must name the qsync-worker binary"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
using test::Process;
using test::TempDir;

constexpr int64_t STEPS = 20;

// The flags every rank of every run shares (the job); --batch is the global batch.
std::vector<std::string> job_args(int64_t global_batch) {
  return {QSYNC_WORKER_BIN, "train", "--model", "mlp", "--steps", std::to_string(STEPS), "--batch",
          std::to_string(global_batch), "--eval-limit", "50", "--threads", "1", "--seed", "3", "--quiet",
          "--collective-timeout", "20"};
}

struct RankRun {
  int code = -1;  // -1: still running after the time limit (then killed)
  nlohmann::json summary;
  std::string err, summary_path, stdout_path;
};

// Starts rank r of a world of ranks.size() with job_args + ranks[r], summary and logs under
// dir/<tag>-rank<r>.*
std::vector<Process> start_ranks(const TempDir& dir, const std::string& tag, int64_t global_batch,
                                 const std::vector<std::vector<std::string>>& ranks) {
  const int world = int(ranks.size()), port = test::free_tcp_port();
  std::vector<Process> procs;
  for (int r = 0; r < world; ++r) {
    const std::string base = dir.file(tag + "-rank" + std::to_string(r));
    test::SpawnOptions o;
    o.args = job_args(global_batch);
    o.args.insert(o.args.end(), ranks[size_t(r)].begin(), ranks[size_t(r)].end());
    o.args.insert(o.args.end(), {"--summary-json", base + ".json"});
    o.env = test::rank_env(r, world, port);
    o.stdout_path = base + ".out";
    o.stderr_path = base + ".err";
    procs.emplace_back(o);
  }
  return procs;
}

std::vector<RankRun> finish_ranks(std::vector<Process>& procs, std::chrono::milliseconds limit = 60s) {
  std::vector<RankRun> out;
  for (Process& p : procs) {
    RankRun r;
    r.code = p.wait_for(limit).value_or(-1);
    r.err = p.err();
    r.stdout_path = p.options().stdout_path;
    const auto& a = p.options().args;
    r.summary_path = *(std::find(a.begin(), a.end(), "--summary-json") + 1);
    const nlohmann::json s = nlohmann::json::parse(test::read_text(r.summary_path), nullptr, false);
    if (!s.is_discarded()) r.summary = s;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RankRun> run_ranks(const TempDir& dir, const std::string& tag, int64_t global_batch,
                               const std::vector<std::vector<std::string>>& ranks) {
  std::vector<Process> procs = start_ranks(dir, tag, global_batch, ranks);
  return finish_ranks(procs);
}

void expect_succeeded(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].code, 0) << "rank " << r << " stderr:\n" << runs[r].err;
    EXPECT_TRUE(runs[r].summary.is_object()) << "rank " << r << ": no summary at " << runs[r].summary_path;
  }
}

std::vector<double> losses_of(const RankRun& r) {
  return r.summary.value("losses", std::vector<double>{});
}

// The FP32 master weights of the checkpoint in `dir`, all parameters concatenated.
std::vector<float> checkpoint_weights(const std::string& dir) {
  const ModelDesc desc = model_desc_find("mlp");
  MemoryAccount memory;
  Model model(desc, &memory, 0);  // another seed: every value must come from the checkpoint
  Optimizer opt(OptimizerConfig{}, model.parameters(), &memory);
  checkpoint_load(checkpoint_path(dir), model, opt);
  std::vector<float> out;
  for (const Parameter* p : model.parameters()) out.insert(out.end(), p->value.f32(), p->value.f32() + p->value.numel());
  return out;
}

// Data parallelism computes the same sums in another order (each rank's weight-gradient GEMM
// reduces over its local rows, then the all-reduce adds the ranks' partial sums), so results
// agree to rounding, not bitwise. Measured here: loss curves within 1e-7 relative, final weights
// within 3e-6 absolute (AdamW divides by sqrt(v), which magnifies rounding in tiny gradients).
// Training on half the global batch, which is what a missing all-reduce or a wrong shard amounts
// to, moves the final weights by 2e-2 and the losses by 1e-2 and more from step 2 on, so the
// tolerances below (30-100x the measured rounding) still catch such bugs.
constexpr double LOSS_RTOL = 1e-5;
constexpr double WEIGHT_ATOL = 1e-4;

void expect_same_training(const RankRun& single, const std::string& single_ckpt, const RankRun& rank0,
                          const std::string& dp_ckpt) {
  const std::vector<double> a = losses_of(single), b = losses_of(rank0);
  ASSERT_EQ(a.size(), size_t(STEPS));
  ASSERT_EQ(b.size(), size_t(STEPS));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double rel = std::abs(a[i] - b[i]) / std::abs(a[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, LOSS_RTOL) << "step " << i + 1 << ": one rank " << a[i] << ", data parallel " << b[i];
  }
  const std::vector<float> wa = checkpoint_weights(single_ckpt), wb = checkpoint_weights(dp_ckpt);
  ASSERT_EQ(wa.size(), wb.size());
  double max_diff = 0;
  for (size_t i = 0; i < wa.size(); ++i) max_diff = std::max(max_diff, double(std::abs(wa[i] - wb[i])));
  EXPECT_LE(max_diff, WEIGHT_ATOL);
  std::printf("worst loss difference %.3g relative; max weight difference %.3g\n", worst, max_diff);
}

TEST(DataParallel, TwoRanksMatchOneRankWithTheGlobalBatch) {
  TempDir dir;
  const auto one = run_ranks(dir, "one", 64, {{"--checkpoint-dir", dir.file("ckpt-one")}});
  const auto two = run_ranks(dir, "two", 64, {{"--checkpoint-dir", dir.file("ckpt-two")}, {}});
  expect_succeeded(one);
  expect_succeeded(two);
  ASSERT_FALSE(HasFailure());
  for (const RankRun& r : two) {
    EXPECT_EQ(r.summary["local_batch"], 32);
    EXPECT_EQ(r.summary["global_batch"], 64);
  }
  // Every rank reports the global loss, and the weights are the same on both ranks.
  EXPECT_EQ(losses_of(two[0]), losses_of(two[1]));
  EXPECT_EQ(two[0].summary["weight_hash"], two[1].summary["weight_hash"]);
  expect_same_training(one[0], dir.file("ckpt-one"), two[0], dir.file("ckpt-two"));
}

TEST(DataParallel, ThreeUnevenRanksMatchOneRankWithTheGlobalBatch) {
  TempDir dir;
  const ModelDesc desc = model_desc_find("mlp");
  std::vector<std::vector<std::string>> ranks;
  const int64_t local[] = {64, 32, 32};
  for (int r = 0; r < 3; ++r) {
    RankPlan plan = plan_uniform(desc, LayerPrecision::FP32);
    plan.rank = r;
    plan.local_batch = local[r];
    const std::string path = dir.file("plan-rank" + std::to_string(r) + ".yaml");
    plan_file_write(path, plan);
    ranks.push_back({"--plan", path});
  }
  ranks[0].insert(ranks[0].end(), {"--checkpoint-dir", dir.file("ckpt-three")});
  const auto one = run_ranks(dir, "one", 128, {{"--checkpoint-dir", dir.file("ckpt-one")}});
  const auto three = run_ranks(dir, "three", 128, ranks);
  expect_succeeded(one);
  expect_succeeded(three);
  ASSERT_FALSE(HasFailure());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(three[size_t(r)].summary["local_batch"], local[r]) << "rank " << r;
    EXPECT_EQ(three[size_t(r)].summary["global_batch"], 128) << "rank " << r;
    EXPECT_EQ(three[size_t(r)].summary["weight_hash"], three[0].summary["weight_hash"]) << "rank " << r;
  }
  expect_same_training(one[0], dir.file("ckpt-one"), three[0], dir.file("ckpt-three"));
}

TEST(DataParallel, Fp32AndInt8RanksKeepBitIdenticalWeights) {
  TempDir dir;
  const auto runs = run_ranks(dir, "mixed", 64,
                              {{"--precision", "fp32", "--weight-hash-every", "5"},
                               {"--precision", "int8", "--weight-hash-every", "5"}});
  expect_succeeded(runs);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(runs[0].summary["plan"], "fc1=fp32 fc2=fp32 fc3=fp32");
  EXPECT_EQ(runs[1].summary["plan"], "fc1=int8 fc2=int8 fc3=int8");
  EXPECT_EQ(runs[0].summary["weight_hash"], runs[1].summary["weight_hash"]);
  EXPECT_EQ(losses_of(runs[0]), losses_of(runs[1]));
  EXPECT_EQ(runs[0].summary["steps"], STEPS);
}

TEST(DataParallel, RanksWithOtherSettingsFailFast) {
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Process> procs = start_ranks(dir, "mismatch", 64, {{}, {"--steps", "21"}});
  const auto runs = finish_ranks(procs, 30s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_NE(runs[r].code, 0) << "rank " << r;
    EXPECT_NE(runs[r].code, -1) << "rank " << r << " still ran after 30 s";
    EXPECT_NE(runs[r].err.find("rank 1 runs other settings than rank 0"), std::string::npos)
        << "rank " << r << " stderr:\n" << runs[r].err;
  }
  // Before any training step: well within the 20 s collective timeout.
  EXPECT_LT(seconds, 15) << "the mismatch should be found at startup";
}

TEST(DataParallel, KilledRankFailsItsPeerAndResumeFinishesTheJob) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt"), ref_ckpt = dir.file("ckpt-ref");
  auto with = [](std::vector<std::string> a, const std::string& ckpt_dir, bool resume) {
    a.insert(a.end(), {"--checkpoint-dir", ckpt_dir, "--checkpoint-every", "5", "--collective-timeout", "5",
                       "--log-json", "--log-every", "1"});
    if (resume) a.push_back("--resume");
    return a;
  };
  // The reference: the same job, uninterrupted.
  const auto ref = run_ranks(dir, "ref", 64, {with({}, ref_ckpt, false), with({}, ref_ckpt, false)});
  expect_succeeded(ref);
  ASSERT_FALSE(HasFailure());

  // Kill rank 1 once it logged step 7: rank 1 finishing step 7 means rank 0 finished step 6 and
  // so wrote the step-5 checkpoint.
  std::vector<Process> procs = start_ranks(dir, "killed", 64, {with({}, ckpt, false), with({}, ckpt, false)});
  const std::string rank1_out = procs[1].options().stdout_path;
  ASSERT_TRUE(test::poll_until([&] { return test::last_logged_step(rank1_out) >= 7 || !procs[1].running(); }, 60s));
  ASSERT_TRUE(procs[1].running()) << "rank 1 ended before it could be killed:\n" << procs[1].err();
  procs[1].signal(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  const int rank1_killed_at_step = int(test::last_logged_step(rank1_out));
  const std::optional<int> rank0_code = procs[0].wait_for(30s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSERT_TRUE(rank0_code.has_value()) << "rank 0 still runs 30 s after its peer died";
  EXPECT_NE(*rank0_code, 0);
  EXPECT_EQ(procs[1].wait_for(5s).value_or(-1), 128 + SIGKILL);
  EXPECT_LT(seconds, 5 + 2) << "rank 0 should fail within the 5 s collective timeout (plus slack)";
  const std::string err0 = procs[0].err();
  EXPECT_NE(err0.find("failed on rank 0 of 2"), std::string::npos) << err0;
  EXPECT_NE(err0.find("a peer rank likely died"), std::string::npos) << err0;
  EXPECT_LT(test::last_logged_step(procs[0].options().stdout_path), STEPS) << "rank 0 should not have finished";
  std::printf("rank 1 killed after step %d; rank 0 failed %.2f s later\n", rank1_killed_at_step, seconds);

  // Restart both ranks from the checkpoint.
  const auto resumed = run_ranks(dir, "resumed", 64, {with({}, ckpt, true), with({}, ckpt, true)});
  expect_succeeded(resumed);
  ASSERT_FALSE(HasFailure());
  const int64_t start = resumed[0].summary["start_step"];
  EXPECT_GE(start, 5);
  EXPECT_EQ(start % 5, 0);
  EXPECT_LE(start, rank1_killed_at_step + 1);
  EXPECT_EQ(resumed[1].summary["start_step"], start);
  EXPECT_EQ(resumed[0].summary["steps"], STEPS);
  // Resuming restores weights, optimizer state and data position exactly, and two ranks' sums
  // do not depend on the order they are added in (a + b == b + a): the same bits.
  const std::vector<double> all = losses_of(ref[0]), tail = losses_of(resumed[0]);
  ASSERT_EQ(tail.size(), size_t(STEPS - start));
  EXPECT_EQ(tail, std::vector<double>(all.begin() + start, all.end()));
  EXPECT_EQ(resumed[0].summary["weight_hash"], ref[0].summary["weight_hash"]);
  EXPECT_EQ(resumed[1].summary["weight_hash"], ref[0].summary["weight_hash"]);
  EXPECT_EQ(checkpoint_weights(ckpt), checkpoint_weights(ref_ckpt));
}

}  // namespace
}  // namespace qsync
