// File: tests/operator/reconciler/job_planning_test.cpp
// Planning a job: profiles from labelled ConfigMaps (exact batch, nearest batch scaled, another
// model's ignored), the built-in estimates for GPU classes, the ProfileMissing message with the
// commands to run, terminal errors (no nodes, infeasible, unknown allocator) and plan.json.
#include <gtest/gtest.h>

#include "tests/support/onnx_writer.h"

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/job_planning.h"
#include "planner/model_desc.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json node(const std::string& name, json labels) {
  return {{"metadata", {{"name", name}, {"labels", labels}}},
          {"status", {{"allocatable", {{"memory", "16Gi"}}}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

api::HybridTrainingJob job(const std::string& allocator = "greedy", json patch = json::object()) {
  json spec = {{"model", {{"zoo", "cnn"}}},
               {"steps", 10},
               {"globalBatch", 128},
               {"planning", {{"allocator", allocator}}},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "training"}}}, {"count", 1}}})},
                 {"inference", json::array({{{"name", "infer"}, {"nodeSelector", {{"pool", "inference"}}}, {"count", 1}}})}}}};
  spec.merge_patch(patch);
  return api::hybrid_training_job_from_json({{"apiVersion", "qsync.dev/v1alpha1"},
                                             {"kind", "HybridTrainingJob"},
                                             {"metadata", {{"name", "fm"}, {"namespace", "team"}, {"generation", 1}}},
                                             {"spec", spec}});
}

std::vector<json> gpu_nodes() {
  return {node("a100", {{"pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}),
          node("t4", {{"pool", "inference"}, {"nvidia.com/gpu.product", "Tesla-T4"}})};
}
std::vector<json> cpu_nodes() {
  return {node("a100", {{"pool", "training"}, {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}}),
          node("cpu", {{"pool", "inference"}, {"qsync.dev/device-class", "cpu-avx2"}})};
}

// A measured-looking profile of `cls` (built from an estimate's shape; only its fields matter).
std::string profile_text(const std::string& model_name, const std::string& cls, int64_t batch) {
  DeviceProfile p = device_profile_estimate(model_desc_find(model_name), "gpu-t4", batch);
  p.device_class = cls;
  p.estimated = false;
  p.memory_bytes = 0;
  p.source = "measured in a test";
  return device_profile_to_json(p);
}

json profile_config_map(const std::string& name, const std::string& text, bool labelled = true) {
  json cm = {{"metadata", {{"name", name}, {"namespace", "team"}}}, {"data", {{"profile.json", text}}}};
  if (labelled) cm["metadata"]["labels"] = {{"qsync.dev/device-profile", "true"}};
  return cm;
}

TEST(JobPlanning, GpuClassesPlanFromEstimates) {
  const JobPlan plan = plan_job(job(), {.nodes = gpu_nodes(), .config_maps = {}});
  ASSERT_EQ(plan.ranks.size(), 2u);
  ASSERT_EQ(plan.rank_files.size(), 2u);
  ASSERT_EQ(plan.summary.ranks.size(), 2u);
  EXPECT_EQ(plan.summary.strategy, "greedy");
  EXPECT_EQ(plan.summary.config_map, "fm-plan");
  EXPECT_GT(plan.summary.predicted_step_seconds, 0);
  EXPECT_EQ(plan.summary.ranks[0].node, "a100");
  EXPECT_EQ(plan.summary.ranks[1].device_class, "gpu-t4");
  EXPECT_EQ(plan.summary.ranks[0].local_batch + plan.summary.ranks[1].local_batch, 128);
  EXPECT_FALSE(plan.summary.ranks[1].precision_mix.empty());
  EXPECT_EQ(plan.rank_files[1].rank, 1);
  EXPECT_EQ(plan.rank_files[1].device_class, "gpu-t4");
  EXPECT_EQ(plan.rank_files[0].model_hash, model_desc_find("cnn").hash);
}

TEST(JobPlanning, ExactAllocatorRuns) {
  const JobPlan plan = plan_job(job("exact"), {.nodes = gpu_nodes(), .config_maps = {}});
  EXPECT_EQ(plan.summary.strategy, "exact");
  EXPECT_EQ(plan.rank_files.size(), 2u);
}

TEST(JobPlanning, CpuClassWithoutProfileSaysHowToMeasureIt) {
  try {
    plan_job(job(), {.nodes = cpu_nodes(), .config_maps = {profile_config_map("unlabelled", profile_text("cnn", "cpu-avx2", 64), false)}});
    FAIL() << "expected ProfileMissing";
  } catch (const PlanningError& e) {
    EXPECT_EQ(e.reason(), "ProfileMissing");
    EXPECT_FALSE(e.terminal());
    const std::string m = e.what();
    EXPECT_NE(m.find("qsync-worker profile --model cnn --device-class cpu-avx2 --batch 64"), std::string::npos) << m;
    EXPECT_NE(m.find("kubectl create configmap -n team qsync-profile-cnn-fmnist-cpu-avx2-b64 --from-file=profile.json="),
              std::string::npos) << m;
    EXPECT_NE(m.find("kubectl label configmap -n team qsync-profile-cnn-fmnist-cpu-avx2-b64 qsync.dev/device-profile=true"),
              std::string::npos) << m;
  }
}

TEST(JobPlanning, ProfilesComeFromLabelledConfigMaps) {
  const std::vector<json> cms = {profile_config_map("cpu-b64", profile_text("cnn", "cpu-avx2", 64))};
  const ConfigMapProfiles found = profiles_from_config_maps(cms);
  ASSERT_EQ(found.profiles.size(), 1u);
  EXPECT_EQ(found.profiles[0].device_class, "cpu-avx2");
  const JobPlan plan = plan_job(job(), {.nodes = cpu_nodes(), .config_maps = cms});
  EXPECT_EQ(plan.summary.ranks[1].device_class, "cpu-avx2");
}

TEST(JobPlanning, NearestBatchIsScaledAndOtherModelsIgnored) {
  const ModelDesc cnn = model_desc_find("cnn");
  const ConfigMapProfiles found = profiles_from_config_maps({profile_config_map("b32", profile_text("cnn", "cpu-avx2", 32)),
                                                             profile_config_map("b256", profile_text("cnn", "cpu-avx2", 256))});
  const DeviceProfile p = select_profile(found.profiles, cnn, "cnn", "cpu-avx2", 48, "team");
  EXPECT_EQ(p.batch, 48);
  DeviceProfile other = device_profile_from_json(profile_text("cnn", "cpu-avx2", 64), "x");
  other.model_hash ^= 1;
  EXPECT_THROW(select_profile({other}, cnn, "cnn", "cpu-avx2", 64, "team"), PlanningError);
  EXPECT_TRUE(select_profile({}, cnn, "cnn", "gpu-h100", 64, "team").estimated);
}

TEST(JobPlanning, BrokenProfileConfigMapIsReported) {
  const ConfigMapProfiles found = profiles_from_config_maps({profile_config_map("broken", "{not json")});
  EXPECT_TRUE(found.profiles.empty());
  ASSERT_EQ(found.problems.size(), 1u);
  EXPECT_NE(found.problems[0].find("broken"), std::string::npos) << found.problems[0];
}

std::string base64(const std::string& bytes) {
  static const char* A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += A[(v >> 18) & 63];
    out += A[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? A[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? A[v & 63] : '=';
  }
  return out;
}

// (B, 1, 28, 28) -> Flatten -> fc Gemm (10): an ONNX model small enough for a ConfigMap.
std::string tiny_onnx() {
  namespace w = qsync::onnx_writer;
  w::GraphSpec g;
  g.inputs = {w::value_info("input", 1, {-1, 1, 28, 28})};
  g.outputs = {w::value_info("logits", 1, {-1, 10})};
  g.initializers = {w::tensor("fc.weight", {10, 784}, std::vector<float>(7840, 0.01f)),
                    w::tensor("fc.bias", {10}, std::vector<float>(10, 0.0f))};
  g.nodes = {w::node("Flatten", "/Flatten", {"input"}, {"x"}),
             w::node("Gemm", "/fc/Gemm", {"x", "fc.weight", "fc.bias"}, {"logits"}, {w::attr_int("transB", 1)})};
  return w::model(g);
}

TEST(JobPlanning, OnnxModelsComeFromAConfigMapsBinaryData) {
  const api::HybridTrainingJob j = job("greedy", {{"model", {{"zoo", nullptr}, {"configMap", {{"name", "m"}, {"key", "model.onnx"}}}}}});
  const json cm = {{"metadata", {{"name", "m"}, {"namespace", "team"}}}, {"binaryData", {{"model.onnx", base64(tiny_onnx())}}}};
  const ModelDesc m = job_model(j, {cm});
  EXPECT_EQ(m.root.kind, LayerKind::GRAPH);
  EXPECT_EQ(m.name, "model");  // as the worker names /etc/qsync/model/model.onnx
  ASSERT_EQ(model_gemm_layers(m).size(), 1u);
  EXPECT_EQ(model_gemm_layers(m)[0]->name, "fc");
  const JobPlan plan = plan_job(j, {.nodes = gpu_nodes(), .config_maps = {cm}});
  EXPECT_EQ(plan.ranks.size(), 2u);
  try {  // the key in data instead of binaryData: missing, with the kubectl command
    (void)job_model(j, {{{"metadata", {{"name", "m"}}}, {"data", {{"model.onnx", "text"}}}}});
    FAIL();
  } catch (const PlanningError& e) {
    EXPECT_EQ(e.reason(), "ModelMissing");
    EXPECT_NE(std::string(e.what()).find("--from-file"), std::string::npos) << e.what();
  }
}

TEST(JobPlanning, TerminalErrors) {
  try {
    plan_job(job(), {.nodes = {node("x", {{"pool", "elsewhere"}})}, .config_maps = {}});
    FAIL();
  } catch (const PlanningError& e) {
    EXPECT_EQ(e.reason(), "NoMatchingNodes");
    EXPECT_TRUE(e.terminal());
  }
  try {
    api::HybridTrainingJob unknown = job();
    unknown.spec.planning.allocator = "fastest";  // the schema refuses it; a stale CRD might not
    plan_job(unknown, {.nodes = gpu_nodes(), .config_maps = {}});
    FAIL();
  } catch (const PlanningError& e) {
    EXPECT_EQ(e.reason(), "InvalidPlanning");
    EXPECT_TRUE(e.terminal());
  }
  try {
    plan_job(job("greedy", {{"globalBatch", 1}}), {.nodes = gpu_nodes(), .config_maps = {}});
    FAIL();
  } catch (const PlanningError& e) {
    EXPECT_EQ(e.reason(), "InvalidPlanning");
    EXPECT_NE(std::string(e.what()).find("globalBatch"), std::string::npos);
  }
}

TEST(JobPlanning, PlanJsonRoundTrips) {
  const JobPlan plan = plan_job(job(), {.nodes = gpu_nodes(), .config_maps = {}});
  const JobPlan back = job_plan_from_json(json::parse(job_plan_to_json(plan).dump()));
  EXPECT_EQ(back.ranks, plan.ranks);
  EXPECT_EQ(back.summary, plan.summary);
  EXPECT_THROW(job_plan_from_json(json::object()), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::reconciler
