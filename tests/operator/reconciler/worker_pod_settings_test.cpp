// File: tests/operator/reconciler/worker_pod_settings_test.cpp
// A worker Pod on a shared cluster: the pod template (operator defaults < spec.podTemplate <
// the entry's) written into the Pod and merged with the operator's own settings, the refused
// overrides, resources from the plan with spec.resources on top, and placement by another
// scheduler (Kueue, a gang scheduler) to the planned nodes instead of one pinned host.
#include <gtest/gtest.h>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/desired_children.h"
#include "operator/reconciler/worker_pod_settings.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json job_object(json spec_patch = json::object(), json labels = json::object()) {
  json spec = {{"model", {{"zoo", "mlp"}}},
               {"steps", 10},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"count", 2}}})},
                 {"inference", json::array({{{"name", "infer"}, {"count", 1}}})}}}};
  spec.merge_patch(spec_patch);
  return {{"apiVersion", "qsync.dev/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "j"}, {"namespace", "team"}, {"uid", "u"}, {"generation", 1}, {"labels", labels}}},
          {"spec", spec}};
}

DiscoveredRank rank_of(int64_t r, const std::string& node, const std::string& cls, const char* kind, const std::string& entry,
                       int64_t gpus, int64_t predicted = 0) {
  DiscoveredRank d{r, node, cls, kind, entry, 0, gpus};
  d.predicted_memory_bytes = predicted;
  return d;
}

const json& worker(const json& pod) { return pod["spec"]["containers"][0]; }

std::string env_of(const json& pod, const std::string& name) {
  for (const json& e : worker(pod)["env"])
    if (e["name"] == name) return e.value("value", "<from>");
  return "<absent>";
}

json required_terms(const json& pod) {
  return pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
}

const json INFERENCE_TAINT = {{"key", "dedicated"}, {"operator", "Equal"}, {"value", "inference"}, {"effect", "NoSchedule"}};

TEST(WorkerPodSettings, TemplateReachesThePodAndTheEntryAddsToTheJobs) {
  const json obj = job_object(
      {{"podTemplate",
        {{"priorityClassName", "research"},
         {"serviceAccountName", "trainer"},
         {"imagePullSecrets", json::array({{{"name", "regcred"}}})},
         {"labels", {{"team", "vision"}}},
         {"annotations", {{"cost-center", "42"}}},
         {"nodeSelector", {{"zone", "a"}}},
         {"env", json::array({{{"name", "HF_HOME"}, {"value", "/cache"}},
                              {{"name", "TOKEN"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "t"}}}}}}})},
         {"volumes", json::array({{{"name", "cache"}, {"emptyDir", {{"medium", "Memory"}}}}})},
         {"volumeMounts", json::array({{{"name", "cache"}, {"mountPath", "/cache"}}})}}},
       {"pool",
        {{"training", json::array({{{"name", "train"}, {"count", 2}}})},
         {"inference", json::array({{{"name", "infer"},
                                     {"count", 1},
                                     {"podTemplate",
                                      {{"tolerations", json::array({INFERENCE_TAINT})},
                                       {"priorityClassName", "borrowed"},
                                       {"env", json::array({{{"name", "HF_HOME"}, {"value", "/fast"}}})}}}}})}}}});
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const json train = desired_pod(obj, job, rank_of(0, "t1", "cpu-avx2", POOL_KIND_TRAINING, "train", 0), 3, 0, {});
  const json infer = desired_pod(obj, job, rank_of(2, "i1", "cpu-avx2", POOL_KIND_INFERENCE, "infer", 0), 3, 0, {});

  EXPECT_EQ(train["spec"]["priorityClassName"], "research");
  EXPECT_EQ(infer["spec"]["priorityClassName"], "borrowed");  // the entry's wins
  EXPECT_EQ(infer["spec"]["serviceAccountName"], "trainer");  // the job's stays
  EXPECT_EQ(train["spec"]["imagePullSecrets"], json::array({{{"name", "regcred"}}}));
  EXPECT_EQ(train["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(train["metadata"]["labels"]["qsync.dev/job"], "j");  // ours kept
  EXPECT_EQ(train["metadata"]["annotations"]["cost-center"], "42");
  EXPECT_EQ(train["metadata"]["annotations"]["qsync.dev/node"], "t1");
  EXPECT_EQ(train["spec"]["nodeSelector"], json({{"zone", "a"}}));
  EXPECT_FALSE(train["spec"].contains("tolerations"));
  EXPECT_EQ(infer["spec"]["tolerations"], json::array({INFERENCE_TAINT}));
  EXPECT_EQ(env_of(train, "HF_HOME"), "/cache");
  EXPECT_EQ(env_of(infer, "HF_HOME"), "/fast");
  EXPECT_EQ(env_of(train, "TOKEN"), "<from>");
  EXPECT_EQ(env_of(train, "RANK"), "0");  // the operator's env stays
  bool cache = false, plan = false;
  for (const json& v : train["spec"]["volumes"]) {
    cache = cache || (v["name"] == "cache" && v["emptyDir"]["medium"] == "Memory");  // kept whole
    plan = plan || v["name"] == "plan";
  }
  EXPECT_TRUE(cache && plan);
  bool mounted = false;
  for (const json& m : worker(train)["volumeMounts"]) mounted = mounted || (m["name"] == "cache" && m["mountPath"] == "/cache");
  EXPECT_TRUE(mounted);
  // The spec round-trips, templates included.
  EXPECT_EQ(api::hybrid_training_job_spec_from_json(api::to_json(job.spec)), job.spec);
}

TEST(WorkerPodSettings, GpuRanksTolerateTheGpuTaintByDefault) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  ChildOptions options;
  const json gpu_taint = {{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  options.gpu_tolerations = json::array({gpu_taint});
  const json gpu = desired_pod(obj, job, rank_of(0, "g", "gpu-t4", POOL_KIND_TRAINING, "train", 1), 1, 0, options);
  const json cpu = desired_pod(obj, job, rank_of(0, "c", "cpu-avx2", POOL_KIND_TRAINING, "train", 0), 1, 0, options);
  EXPECT_EQ(gpu["spec"]["tolerations"], json::array({gpu_taint}));
  EXPECT_FALSE(cpu["spec"].contains("tolerations"));
}

TEST(WorkerPodSettings, RequiredNodeAffinityIsCombinedWithThePlacement) {
  const json zone_a = {{"key", "zone"}, {"operator", "In"}, {"values", {"a"}}};
  const json zone_b = {{"key", "zone"}, {"operator", "In"}, {"values", {"b"}}};
  const json anti = {{"podAntiAffinity", {{"preferredDuringSchedulingIgnoredDuringExecution", json::array()}}}};
  json affinity = anti;
  affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] =
      json::array({{{"matchExpressions", {zone_a}}}, {{"matchExpressions", {zone_b}}}});
  const json obj = job_object({{"podTemplate", {{"affinity", affinity}}}});
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const json pod = desired_pod(obj, job, rank_of(0, "t1", "cpu-avx2", POOL_KIND_TRAINING, "train", 0), 1, 0, {});
  // (zone a OR zone b) AND the planned host: two terms, each with both expressions.
  const json terms = required_terms(pod);
  ASSERT_EQ(terms.size(), 2u) << terms.dump();
  for (const json& term : terms) {
    ASSERT_EQ(term["matchExpressions"].size(), 2u);
    EXPECT_EQ(term["matchExpressions"][0]["key"], "kubernetes.io/hostname");
    EXPECT_EQ(term["matchExpressions"][1]["key"], "zone");
  }
  EXPECT_TRUE(pod["spec"]["affinity"].contains("podAntiAffinity"));
}

TEST(WorkerPodSettings, OverridesOfTheOperatorsNamesAreRefused) {
  auto problem = [](json patch) {
    try {
      api::hybrid_training_job_spec_from_json(job_object(std::move(patch))["spec"]);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  EXPECT_NE(problem({{"podTemplate", {{"env", json::array({{{"name", "WORLD_SIZE"}, {"value", "9"}}})}}}}).find("WORLD_SIZE is set by the operator"),
            std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"volumes", json::array({{{"name", "plan"}, {"emptyDir", json::object()}}})}}}})
                .find("one of the operator's volumes"),
            std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"volumeMounts", json::array({{{"name", "nope"}, {"mountPath", "/x"}}})}}}})
                .find("names no volume"),
            std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"labels", {{"qsync.dev/rank", "0"}}}}}}).find("qsync.dev/ prefix"), std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"tolerations", json::array({{{"operator", "Sometimes"}}})}}}}).find("is not one of Exists, Equal"),
            std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"schedulerName", 3}}}}).find("must be a string"), std::string::npos);
  EXPECT_NE(problem({{"podTemplate", {{"hostNetwork", true}}}}).find("unknown field \"hostNetwork\""), std::string::npos);
  // A mount of a job-wide volume from an entry's template is fine.
  EXPECT_EQ(problem({{"podTemplate", {{"volumes", json::array({{{"name", "cache"}, {"emptyDir", json::object()}}})}}},
                     {"pool", {{"training", json::array({{{"name", "train"},
                                                          {"podTemplate", {{"volumeMounts", json::array({{{"name", "cache"}, {"mountPath", "/c"}}})}}}}})}}}}),
            "<accepted>");
}

TEST(WorkerPodSettings, ResourcesComeFromThePlanWithHeadroom) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  // CPU rank, predicted peak 1 GiB: 1 GiB x 1.25 + 512 MiB = 1792 MiB, requested and the limit.
  const json cpu = worker_resources(job, rank_of(0, "c", "cpu-avx2", POOL_KIND_TRAINING, "train", 0, 1ll << 30), false);
  EXPECT_EQ(cpu["requests"]["memory"], "1792Mi");
  EXPECT_EQ(cpu["limits"]["memory"], "1792Mi");
  EXPECT_EQ(cpu["requests"]["cpu"], "1");
  EXPECT_FALSE(cpu["requests"].contains("nvidia.com/gpu"));
  // GPU rank with 2 GPUs: the host side's 2 GiB x 1.25 + 512 MiB = 3072 MiB, and its GPUs.
  const json gpu = worker_resources(job, rank_of(0, "g", "gpu-a100", POOL_KIND_TRAINING, "train", 2, 40ll << 30), true);
  EXPECT_EQ(gpu["requests"]["memory"], "3072Mi");
  EXPECT_EQ(gpu["requests"]["nvidia.com/gpu"], "2");
  EXPECT_EQ(gpu["limits"]["nvidia.com/gpu"], "2");

  // spec.resources replaces key by key; a memory request without a limit drops the computed limit.
  const json custom = job_object({{"resources", {{"requests", {{"memory", "64Gi"}, {"cpu", "8"}}}, {"limits", {{"cpu", "8"}}}}}});
  const json r = worker_resources(api::hybrid_training_job_from_json(custom),
                                  rank_of(0, "c", "cpu-avx2", POOL_KIND_TRAINING, "train", 0, 1ll << 30), false);
  EXPECT_EQ(r["requests"]["memory"], "64Gi");
  EXPECT_FALSE(r["limits"].contains("memory"));
  EXPECT_EQ(r["limits"]["cpu"], "8");
}

TEST(WorkerPodSettings, KueueOrAGangSchedulerGetsThePlannedNodesNotOneHost) {
  const std::vector<DiscoveredRank> planned = {rank_of(0, "t1", "gpu-t4", POOL_KIND_TRAINING, "train", 1),
                                               rank_of(1, "t2", "gpu-t4", POOL_KIND_TRAINING, "train", 1),
                                               rank_of(2, "i1", "gpu-a10", POOL_KIND_INFERENCE, "infer", 1)};
  const json pinned_obj = job_object();
  const json pinned = desired_pod(pinned_obj, api::hybrid_training_job_from_json(pinned_obj), planned[0], 3, 0, {}, planned);
  EXPECT_EQ(required_terms(pinned)[0]["matchExpressions"][0]["values"], json::array({"t1"}));

  const json queued_obj = job_object(json::object(), {{KUEUE_QUEUE_LABEL, "research"}});
  const json queued = desired_pod(queued_obj, api::hybrid_training_job_from_json(queued_obj), planned[0], 3, 0, {}, planned);
  EXPECT_EQ(required_terms(queued)[0]["matchExpressions"][0]["values"], json::array({"t1", "t2"}));  // same entry and class

  const json gang_obj = job_object({{"podTemplate", {{"schedulerName", "volcano"}}}});
  const json gang = desired_pod(gang_obj, api::hybrid_training_job_from_json(gang_obj), planned[2], 3, 0, {}, planned);
  EXPECT_EQ(required_terms(gang)[0]["matchExpressions"][0]["values"], json::array({"i1"}));
  EXPECT_EQ(gang["spec"]["schedulerName"], "volcano");
}

}  // namespace
}  // namespace qsync::reconciler
