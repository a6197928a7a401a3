// File: tests/operator/reconciler/comm_profiles_test.cpp
// The all-reduce the operator plans with (operator/reconciler/comm_profiles.h): the estimate
// without a measured profile; a labelled comm.json ConfigMap of the plan's world size taken as
// it is, another world size rescaled, unlabelled or other-prefix ConfigMaps ignored, a broken one
// reported; and plan_job's prediction moving with the measured all-reduce (the plan's input).
#include <gtest/gtest.h>

#include <iostream>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/comm_profiles.h"
#include "operator/reconciler/job_planning.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

// What `qsync-bench-allreduce --comm-profile` writes.
std::string comm_text(int world, double alpha, double beta) {
  return json{{"kind", "qsync-comm-profile"}, {"version", DEVICE_PROFILE_VERSION}, {"world_size", world}, {"alpha", alpha},
              {"beta", beta}, {"late_sync_seconds", 0.0}, {"estimated", false}, {"source", "qsync-bench-allreduce"}}
      .dump();
}

json comm_config_map(const std::string& name, const std::string& text, bool labelled = true) {
  json cm = {{"metadata", {{"name", name}, {"namespace", "team"}}}, {"data", {{"comm.json", text}}}};
  if (labelled) cm["metadata"]["labels"] = {{"qsync.dev/comm-profile", "true"}};
  return cm;
}

TEST(CommProfiles, WithoutAMeasuredProfileTheEstimateIsUsedAndSaidSo) {
  const PlanningComm comm = planning_comm_profile({comm_config_map("unlabelled", comm_text(2, 0.5, 0), false)}, "", 2);
  const CommProfile estimate = comm_profile_estimate(2);
  EXPECT_DOUBLE_EQ(comm.profile.alpha, estimate.alpha);
  EXPECT_DOUBLE_EQ(comm.profile.beta, estimate.beta);
  EXPECT_NE(comm.note.find("all-reduce estimated"), std::string::npos) << comm.note;
  EXPECT_NE(comm.note.find("qsync.dev/comm-profile=true"), std::string::npos) << comm.note;
}

TEST(CommProfiles, AMeasuredProfileOfTheWorldSizeIsTakenAsItIs) {
  const std::vector<json> cms = {comm_config_map("qsync-comm-w4", comm_text(4, 0.002, 1e-9)),
                                 comm_config_map("qsync-comm-w2", comm_text(2, 0.001, 2e-9)),
                                 comm_config_map("other-comm-w2", comm_text(2, 9.0, 9.0))};
  const PlanningComm comm = planning_comm_profile(cms, "qsync-", 2);
  EXPECT_DOUBLE_EQ(comm.profile.alpha, 0.001);
  EXPECT_DOUBLE_EQ(comm.profile.beta, 2e-9);
  EXPECT_FALSE(comm.profile.estimated);
  EXPECT_NE(comm.note.find("all-reduce measured"), std::string::npos) << comm.note;
  EXPECT_NE(comm.note.find("ConfigMap qsync-comm-w2"), std::string::npos) << comm.note;
  EXPECT_TRUE(comm.problems.empty());
}

TEST(CommProfiles, AnotherWorldSizeIsRescaledByTheRing) {
  const PlanningComm comm = planning_comm_profile({comm_config_map("qsync-comm-w2", comm_text(2, 0.001, 2e-9))}, "", 4);
  EXPECT_DOUBLE_EQ(comm.profile.alpha, 0.001 * 3);            // (n - 1) / (m - 1) ring steps
  EXPECT_DOUBLE_EQ(comm.profile.beta, 2e-9 * (3.0 / 4) / 0.5);  // ((n - 1) / n) / ((m - 1) / m) traffic
  EXPECT_NE(comm.note.find("all-reduce measured"), std::string::npos) << comm.note;
  EXPECT_NE(comm.note.find("rescaled from 2 to 4 ranks"), std::string::npos) << comm.note;
}

TEST(CommProfiles, BrokenOrKeylessConfigMapsAreReportedAndSkipped) {
  json keyless = comm_config_map("qsync-comm-keyless", "");
  keyless["data"] = {{"profile.json", "{}"}};
  const PlanningComm comm = planning_comm_profile({comm_config_map("qsync-comm-bad", "{\"kind\": \"nope\"}"), keyless}, "", 2);
  ASSERT_EQ(comm.problems.size(), 2u);
  EXPECT_NE(comm.problems[0].find("ConfigMap qsync-comm-bad key comm.json is not a qsync-comm-profile file"), std::string::npos)
      << comm.problems[0];
  EXPECT_NE(comm.problems[1].find("ConfigMap qsync-comm-keyless key comm.json is missing"), std::string::npos) << comm.problems[1];
  EXPECT_NE(comm.note.find("all-reduce estimated"), std::string::npos);
}

json gpu_node(const std::string& name, const std::string& pool, const std::string& product) {
  return {{"metadata", {{"name", name}, {"labels", {{"pool", pool}, {"nvidia.com/gpu.product", product}}}}},
          {"status", {{"allocatable", {{"memory", "16Gi"}}}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

// The plan's input: a slow measured all-reduce (0.5 s per bucket) raises the predicted step by
// at least that over the estimate's (a 10 Gbit/s ring: well under 0.5 s for the cnn's gradients).
TEST(CommProfiles, AMeasuredAllReduceChangesThePlan) {
  const json spec = {{"model", {{"zoo", "cnn"}}},
                     {"steps", 10},
                     {"globalBatch", 128},
                     {"planning", {{"allocator", "greedy"}}},
                     {"pool",
                      {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "training"}}}, {"count", 1}}})},
                       {"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"pool", "inference"}}}, {"count", 1}}})}}}};
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(
      {{"apiVersion", "qsync.dev/v1alpha1"}, {"kind", "HybridTrainingJob"},
       {"metadata", {{"name", "fm"}, {"namespace", "team"}, {"generation", 1}}}, {"spec", spec}});
  const std::vector<json> nodes = {gpu_node("a100", "training", "NVIDIA-A100-SXM4-80GB"), gpu_node("t4", "inference", "Tesla-T4")};
  const JobPlan estimated = plan_job(job, {.nodes = nodes, .config_maps = {}});
  const JobPlan measured =
      plan_job(job, {.nodes = nodes, .config_maps = {comm_config_map("qsync-comm-w2", comm_text(2, 0.5, 1e-9))}});
  std::cout << "predicted step: estimated all-reduce " << estimated.summary.predicted_step_seconds
            << " s, measured (alpha 0.5 s) " << measured.summary.predicted_step_seconds << " s\n";
  EXPECT_LT(estimated.summary.predicted_step_seconds, 0.5);
  EXPECT_GE(measured.summary.predicted_step_seconds, estimated.summary.predicted_step_seconds + 0.5)
      << "estimated " << estimated.summary.predicted_step_seconds << " s, measured " << measured.summary.predicted_step_seconds << " s";
  auto noted = [](const JobPlan& plan, const std::string& what) {
    for (const std::string& n : plan.notes)
      if (n.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(noted(measured, "all-reduce measured")) << "notes: " << json(measured.notes).dump();
  EXPECT_TRUE(noted(estimated, "all-reduce estimated"));
}

}  // namespace
}  // namespace qsync::reconciler
