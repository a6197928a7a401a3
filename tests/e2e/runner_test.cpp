// File: tests/e2e/runner_test.cpp
// End-to-end tests of `qsync run JOB.yaml` (runner/): a two-worker job (cpu-avx512 and cpu-avx2,
// or the classes they fall back to here) finishes with its summary JSON, per-rank plans and a
// checkpoint; job files with an unknown device class, an unknown allocator, no model, a missing
// data path, a global batch below the ranks or a GPU class this machine lacks are refused with a
// message naming the field, before any measurement or worker starts; Ctrl-C (SIGINT to the
// runner) makes the workers checkpoint and stop, the runner exit 130, and `qsync run --resume`
// finish the job from that checkpoint. With the planner (allocator exact), the runner measures
// the missing profiles and calibration statistics once, keeps them for the next run, and the
// summary carries each rank's predicted step next to the measured one (pinned or not, the ranks
// are profiled together, as the job runs them); a memory budget no
// precision fits is refused naming the rank's device and the memory that would fit.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "tests/e2e/process.h"
#include "tests/e2e/runner_run.h"

#ifndef QSYNC_RUNNER_BIN
#error "QSYNC_RUNNER_BIN must name the qsync binary"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using test::Process;
using test::TempDir;
using namespace runner_e2e;

TEST(Runner, RunsAJobWithSummaryPlansAndCheckpoint) {
  TempDir dir;
  const RunnerRun r = run_runner(dir, dir.write("job.yaml", job_yaml(20)));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json& s = r.summary;
  ASSERT_TRUE(s.is_object()) << "no --summary-json written";
  EXPECT_EQ(s["succeeded"], true);
  EXPECT_EQ(s["steps"], 20);
  EXPECT_EQ(s["global_batch"], 32);
  ASSERT_TRUE(s["final_test_accuracy"].is_number()) << s.dump(2);
  EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.1) << "20 steps of the MLP beat chance (10%)";
  ASSERT_TRUE(s["samples_per_second"].is_number()) << s.dump(2);
  EXPECT_GT(s["samples_per_second"].get<double>(), 0);
  ASSERT_EQ(s["ranks"].size(), 2u) << s.dump(2);
  const std::string requested[] = {"cpu-avx512", "cpu-avx2"};
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& pr = s["ranks"][size_t(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + pr.dump());
    EXPECT_EQ(pr["rank"], rank);
    EXPECT_EQ(pr["device_class"], class_here(requested[rank]));
    EXPECT_EQ(pr["requested_device_class"], requested[rank]);
    EXPECT_EQ(pr["exit_code"], 0);
    EXPECT_EQ(pr["local_batch"], 16);
    ASSERT_TRUE(pr["median_step_seconds"].is_number());
    EXPECT_GT(pr["median_step_seconds"].get<double>(), 0);
    ASSERT_TRUE(pr["median_wait_seconds"].is_number());
    EXPECT_GE(pr["median_wait_seconds"].get<double>(), 0);
    EXPECT_LE(pr["median_wait_seconds"].get<double>(), pr["median_step_seconds"].get<double>());
    ASSERT_TRUE(pr["peak_memory_bytes"].is_number());
    EXPECT_GT(pr["peak_memory_bytes"].get<double>(), 0);

    // The plan the runner wrote for this rank, as the worker read it.
    const std::string plan_path = dir.file("work/plans/rank-" + std::to_string(rank) + ".yaml");
    ASSERT_TRUE(fs::exists(plan_path));
    const RankPlan plan = plan_file_load(plan_path, model_desc_find("mlp"));
    EXPECT_EQ(plan.rank, rank);
    EXPECT_EQ(plan.local_batch, 16);
    EXPECT_EQ(plan.device_class, class_here(requested[rank]));
    EXPECT_EQ(plan.precision_of("fc1"), LayerPrecision::FP32);
  }
  EXPECT_TRUE(fs::exists(dir.file("work/checkpoints/latest.qckpt")));
  EXPECT_NE(r.out.find("job e2e-runner: succeeded"), std::string::npos) << r.out;
}

TEST(Runner, TrainsAnOnnxModelWithPlansNamedAfterItsNodes) {
  TempDir dir;
  const std::string onnx = std::string(QSYNC_SOURCE_DIR) + "/tests/golden/onnx/resnet18.onnx";  // 32 x 32: padded images
  const std::string job = dir.write("job.yaml", job_yaml(6, "cpu-avx512", "cpu-avx2", "  model: {onnx: " + onnx + "}\n"));
  Process p = start_runner(dir, job, {}, "run");
  const RunnerRun r = finish_runner(p, dir, "run", 180s);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.summary["succeeded"], true);
  EXPECT_EQ(r.summary["steps"], 6);
  const ModelDesc model = model_desc_find(onnx);
  for (int rank = 0; rank < 2; ++rank) {
    const RankPlan plan = plan_file_load(dir.file("work/plans/rank-" + std::to_string(rank) + ".yaml"), model);
    EXPECT_EQ(plan.precision_of("layer1.layer1.0.conv1"), LayerPrecision::FP32);
    EXPECT_EQ(plan.precision_of("fc"), LayerPrecision::FP32);
  }
}

// A refused job file: exit 1 at once, stderr naming every needle, and no worker started.
void expect_refused(const std::string& yaml, const std::vector<std::string>& needles) {
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  const RunnerRun r = run_runner(dir, dir.write("job.yaml", yaml));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
  EXPECT_NE(r.err.find("qsync: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job.yaml"), std::string::npos) << "the message names the file: " << r.err;
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' in: " << r.err;
  EXPECT_FALSE(fs::exists(dir.file("work/plans/rank-0.yaml"))) << "a worker was started for a refused job";
}

TEST(Runner, RefusesAnUnknownDeviceClassNamingTheField) {
  expect_refused(job_yaml(20, "cpu-avx512", "cpu-nope"), {"spec.pool.local[1].deviceClass", "'cpu-nope'", "cpu-avx2"});
}

TEST(Runner, RefusesAnUnknownAllocatorNamingTheField) {
  expect_refused(job_yaml(20, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "bogus"),
                 {"spec.planning.allocator", "\"bogus\"", "uniform"});
}

TEST(Runner, RefusesAMissingDataPathNamingTheFieldAndThePath) {
  std::string job = job_yaml(20);
  job.replace(job.find("  optimizer:"), 0, "  data: {path: /nonexistent/fashion-mnist}\n");
  expect_refused(job, {"spec.data.path", "/nonexistent/fashion-mnist does not exist"});
}

TEST(Runner, RefusesAGlobalBatchBelowTheRanksBeforeAnyMeasurement) {
  std::string job = job_yaml(20, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "exact");
  job.replace(job.find("globalBatch: 32"), 15, "globalBatch: 1");
  expect_refused(job, {"spec.globalBatch 1 is smaller than the 2 ranks", "at least 2"});
}

TEST(Runner, RefusesAGpuClassThisMachineLacks) {
  if (device_class_availability(device_class_by_name("gpu-t4")).available) GTEST_SKIP() << "this machine has a T4";
  expect_refused(job_yaml(20, "cpu-avx2", "gpu-t4"), {"spec.pool.local[1].deviceClass", "GPU class", "operator"});
}

TEST(Runner, RefusesAJobWithoutAModelNamingTheField) {
  expect_refused(job_yaml(20, "cpu-avx512", "cpu-avx2", ""), {"spec.model is missing"});
}

// Bad numbers on the command line (found by tests/fuzz's number readers' rule: std::stoi's bare
// "stoi" names nothing): each is refused naming the flag and the value, before any worker starts.
TEST(Runner, RefusesBadNumberFlagsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--master-port", "abc"}, "--master-port expects an integer, got 'abc'"},
      {{"--master-port", "99999999999999999999"}, "--master-port expects an integer, got '99999999999999999999'"},
      {{"--master-port", "70000"}, "--master-port takes a TCP port"},
      {{"--collective-timeout", "soon"}, "--collective-timeout expects a finite number, got 'soon'"},
      {{"--collective-timeout", "nan"}, "--collective-timeout expects a finite number, got 'nan'"},
      {{"--collective-timeout", "-1"}, "--collective-timeout takes a positive number of seconds"},
      {{"--metrics-base-port", "4294967297"}, "--metrics-base-port takes a TCP port"},
      {{"--compare-steps", "1e9x"}, "--compare-steps expects an integer, got '1e9x'"},
      {{"--profile-rounds", ""}, "--profile-rounds expects an integer, got ''"},
  };
  for (const auto& [flags, needle] : cases) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    TempDir dir;
    const RunnerRun r = run_runner(dir, dir.write("job.yaml", job_yaml(20)), flags);
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("work/plans/rank-0.yaml"))) << "a worker was started";
  }
}

// Ctrl-C: 60 steps (about 3 s here) leave time to interrupt the job after its first checkpoint
// (step 5) and before its end; the rest is then done by --resume.
TEST(Runner, CtrlCCheckpointsAndResumeFinishesTheJob) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(60));
  const std::string ckpt = dir.file("work/checkpoints/latest.qckpt");
  Process runner = start_runner(dir, job, {}, "interrupted");
  ASSERT_TRUE(test::poll_until([&] { return fs::exists(ckpt) || !runner.running(); }, 60s));
  ASSERT_TRUE(runner.running()) << "the job ended before its first checkpoint:\n" << runner.out() << runner.err();
  runner.signal(SIGINT);  // to the runner only: it forwards the request to its workers
  const RunnerRun stopped = finish_runner(runner, dir, "interrupted", 30s);
  ASSERT_EQ(stopped.code, 130) << stopped.out << stopped.err;
  EXPECT_NE(stopped.out.find("interrupted: asking the workers to checkpoint and stop"), std::string::npos)
      << stopped.out;
  ASSERT_TRUE(fs::exists(ckpt));
  const nlohmann::json r0 = rank_summary(dir, 0), r1 = rank_summary(dir, 1);
  EXPECT_EQ(r0.value("stopped_early", false), true) << r0.dump(2);
  EXPECT_EQ(r1.value("stopped_early", false), true) << r1.dump(2);
  const int64_t stopped_at = r0.value("steps", int64_t(0));
  EXPECT_GE(stopped_at, 5);
  EXPECT_LT(stopped_at, 60);
  EXPECT_EQ(r1.value("steps", int64_t(-1)), stopped_at) << "every rank stops at the same step";
  for (const auto& pr : stopped.summary["ranks"]) EXPECT_EQ(pr["exit_code"], 0) << pr.dump();

  const RunnerRun resumed = run_runner(dir, job, {"--resume"}, "resumed");
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(resumed.summary["steps"], 60);
  EXPECT_TRUE(resumed.summary["final_test_accuracy"].is_number());
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json s = rank_summary(dir, rank);
    EXPECT_EQ(s.value("start_step", int64_t(-1)), stopped_at) << "rank " << rank << " resumed elsewhere";
    EXPECT_EQ(s.value("stopped_early", true), false);
    EXPECT_EQ(s.value("losses", std::vector<double>{}).size(), size_t(60 - stopped_at));
  }
}

TEST(Runner, PlansWithTheExactAllocatorMeasuringOnceAndReportsPredictions) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(8, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "exact"));
  const RunnerRun first = run_runner(dir, job, {"--profiles", dir.file("profiles")}, "first");
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("measuring the"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("collecting calibration statistics"), std::string::npos) << first.out;
  const nlohmann::json& plan = first.summary["plan"];
  ASSERT_TRUE(plan.is_object()) << first.summary.dump(2);
  EXPECT_EQ(plan["strategy"], "exact");
  EXPECT_NE(plan["indicator"].get<std::string>().find("bidirectional"), std::string::npos) << plan.dump(2);
  EXPECT_GT(plan["predicted_step_seconds"].get<double>(), 0);
  for (const auto& r : first.summary["ranks"]) {
    ASSERT_TRUE(r["predicted"].is_object()) << r.dump(2);
    const double predicted = r["predicted"]["step_seconds"].get<double>();
    const double measured = r["median_step_seconds"].get<double>();
    EXPECT_GT(predicted, 0);
    // Same order of magnitude (the prediction-error benchmark measures the real error).
    EXPECT_LT(predicted, measured * 10) << r.dump(2);
    EXPECT_GT(predicted, measured / 10) << r.dump(2);
  }
  EXPECT_NE(first.out.find("(predicted)"), std::string::npos) << "the summary table shows predictions: " << first.out;
  // With a CPU per rank, each rank is pinned to its own and the profiles are measured as one
  // world of both ranks, each on its rank's CPU.
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_EQ(first.summary["ranks"][0]["cpus"], "0") << first.summary.dump(2);
    EXPECT_EQ(first.summary["ranks"][1]["cpus"], "1") << first.summary.dump(2);
    EXPECT_NE(first.out.find("pinned: rank 0 on CPU 0, rank 1 on CPU 1"), std::string::npos) << first.out;
    for (const char* c : {"cpu-avx512", "cpu-avx2"}) {
      const std::string text =
          test::read_text(dir.file(std::string("profiles/mlp-fmnist.") + class_here(c) + ".b16.profile.json"));
      EXPECT_NE(text.find("of a world of 2 synchronizing gradients"), std::string::npos) << c << ": " << text.substr(0, 600);
      EXPECT_NE(text.find("median of 1 round of"), std::string::npos) << "--profile-rounds 1 reaches the profiler";
      EXPECT_EQ(text.find("sharing the CPUs"), std::string::npos) << "pinned ranks do not share CPUs: " << c;
    }
  }
  // The second run reuses the profiles and the statistics.
  const RunnerRun second = run_runner(dir, job, {"--profiles", dir.file("profiles")}, "second");
  ASSERT_EQ(second.code, 0) << second.out << second.err;
  EXPECT_EQ(second.out.find("measuring the"), std::string::npos) << second.out;
  EXPECT_EQ(second.out.find("collecting calibration"), std::string::npos) << second.out;
  EXPECT_EQ(second.summary["plan"]["ranks"], first.summary["plan"]["ranks"]) << "same measurements, same prediction";
}

// Unpinned ranks share the machine's CPUs in the job, so they are profiled the same way: all at
// once, as one world that synchronizes its gradients, not one at a time alone (which left every
// shared pool under-predicted).
TEST(Runner, ProfilesUnpinnedRanksTogetherAsTheJobRunsThem) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(8, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "exact"));
  const RunnerRun r = run_runner(dir, job, {"--profiles", dir.file("profiles"), "--no-pin"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("pinned:"), std::string::npos) << r.out;
  for (const auto& rank : r.summary["ranks"]) EXPECT_EQ(rank.value("cpus", std::string()), "") << rank.dump(2);
  for (const char* c : {"cpu-avx512", "cpu-avx2"}) {
    const std::string text =
        test::read_text(dir.file(std::string("profiles/mlp-fmnist.") + class_here(c) + ".b16.profile.json"));
    EXPECT_NE(text.find("of a world of 2 synchronizing gradients"), std::string::npos) << c << ": " << text.substr(0, 600);
    // Costs as means (preemption in every step), the world's step over whole steps one after another.
    EXPECT_NE(text.find(" steps in blocks a round"), std::string::npos) << c;
    EXPECT_NE(text.find("), mean of "), std::string::npos) << c << ": " << text.substr(0, 600);
  }
}

// --plans DIR: the given plan files run as they are (another split of the batch, a mixed plan),
// predicted by the replayer over the profiles already measured (scaled, not re-measured).
TEST(Runner, RunsGivenPlansAtAnotherBatchWithoutRemeasuring) {
  TempDir dir;
  const std::string job = dir.write("job.yaml", job_yaml(6, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "uniform"));
  RunnerRun first = run_runner(dir, job, {"--profiles", dir.file("profiles")}, "first");
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const ModelDesc mlp = model_desc_find("mlp");
  for (int r = 0; r < 2; ++r) {
    RankPlan p = plan_file_load(dir.file("work/plans/rank-" + std::to_string(r) + ".yaml"), mlp);
    p.local_batch = r == 0 ? 20 : 12;
    if (r == 1) p.layers[model_gemm_layers(mlp).front()->name] = LayerPrecision::INT8_ALL;
    fs::create_directories(dir.file("given"));
    plan_file_write(dir.file("given/rank-" + std::to_string(r) + ".yaml"), p);
  }
  const RunnerRun r = run_runner(dir, job, {"--profiles", dir.file("profiles"), "--plans", dir.file("given")}, "given");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("measuring the"), std::string::npos) << "the batch-16 profiles serve batches 20 and 12: " << r.out;
  EXPECT_NE(r.summary["plan"]["strategy"].get<std::string>().find("given plans"), std::string::npos) << r.summary.dump(2);
  EXPECT_EQ(r.summary["ranks"][0]["local_batch"], 20);
  EXPECT_EQ(r.summary["ranks"][1]["local_batch"], 12);
  EXPECT_GT(r.summary["ranks"][1]["predicted"]["step_seconds"].get<double>(), 0);
  EXPECT_NE(r.summary["ranks"][1]["plan"].get<std::string>().find("int8-all"), std::string::npos);
  // Plans whose batches do not add up to the job's are refused.
  RankPlan p = plan_file_load(dir.file("given/rank-0.yaml"), mlp);
  p.local_batch = 5;
  plan_file_write(dir.file("given/rank-0.yaml"), p);
  const RunnerRun bad = run_runner(dir, job, {"--profiles", dir.file("profiles"), "--plans", dir.file("given")}, "bad");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("adding up to 17, not the job's globalBatch 32"), std::string::npos) << bad.err;
}

TEST(Runner, RefusesAPoolWhoseDeviceCannotHoldTheModel) {
  TempDir dir;
  std::string job = job_yaml(4, "cpu-avx512", "cpu-avx2", "  model: {zoo: mlp}\n", "greedy");
  job.replace(job.rfind("threads: 1}"), std::string("threads: 1}").size(), "threads: 1, memoryBudget: 64Ki}");
  const RunnerRun r = run_runner(dir, dir.write("job.yaml", job), {"--profiles", dir.file("profiles")});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(class_here("cpu-avx2")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("would fit"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("work/summaries/rank-0.json"))) << "no worker started";
}

}  // namespace
}  // namespace qsync
