// File: tests/operator/api/hybrid_training_job_test.cpp
// The typed HybridTrainingJob: JSON -> struct -> JSON round trips, the CRD's defaults applied in
// C++, and every invalid spec refused with a message that names the field.
#include "operator/api/hybrid_training_job.h"

#include <gtest/gtest.h>

#include "operator/api/status_fields.h"
#include "planner/job_field_validation.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;

json minimal_job() {
  return json::parse(R"({
    "apiVersion": "qsync.dev/v1alpha1", "kind": "HybridTrainingJob",
    "metadata": {"name": "fmnist", "namespace": "team-a", "generation": 3, "uid": "u-1"},
    "spec": {
      "model": {"zoo": "cnn"},
      "steps": 300,
      "pool": {"training": [{"name": "train", "nodeSelector": {"qsync.dev/pool": "training"}}]}
    }})");
}

json full_job() {
  return json::parse(R"J({
    "apiVersion": "qsync.dev/v1alpha1", "kind": "HybridTrainingJob",
    "metadata": {"name": "big", "namespace": "ml", "finalizers": ["x/y"], "labels": {"team": "a"}},
    "spec": {
      "model": {"configMap": {"name": "models", "key": "net.yaml"}},
      "data": {"volume": {"claimName": "datasets", "path": "fmnist"}},
      "optimizer": {"name": "sgd", "lr": 0.1, "weightDecay": 0.0001, "warmupSteps": 50, "gradClip": 1.5,
                    "schedule": "constant"},
      "epochs": 1.5, "globalBatch": 256, "seed": 7, "evalLimit": 1000, "evalEvery": 25,
      "checkpoint": {"dir": "ckpt", "volume": {"claimName": "ckpts"}, "intervalSteps": 20, "keep": 3},
      "image": "registry.local/qsync-worker:dev", "imagePullPolicy": "IfNotPresent",
      "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "32Gi"}},
      "pool": {
        "training": [{"name": "a100", "nodeSelector": {"pool": "train"}, "count": 2, "deviceClass": "a100",
                      "memoryBudget": "40Gi", "gpusPerRank": 1}],
        "inference": [{"name": "t4", "nodeSelector": {"pool": "infer"}, "count": 3, "offPeakOnly": true,
                       "gpusPerRank": 0,
                       "borrow": {"workload": {"kind": "StatefulSet", "name": "chat"}, "minServingReplicas": 2,
                                  "reclaimGraceSeconds": 90, "lendCooldownSeconds": 600,
                                  "windows": [{"start": "0 20 * * 1-5", "end": "0 7 * * 2-6", "timeZone": "America/New_York"}],
                                  "demand": {"prometheus": {"url": "http://prometheus:9090",
                                                            "query": "sum(rate(requests_total[1m]))"},
                                             "queueing": {"serviceTime": "200ms", "serversPerReplica": 4,
                                                          "waitTarget": "50ms", "waitQuantile": 0.95},
                                             "headroomPercent": 15, "maxSampleAgeSeconds": 60}}}],
        "local": [{"name": "w0", "deviceClass": "cpu-avx2", "threads": 2, "memoryBudget": "1Gi", "precision": "int8",
                   "localBatch": 32}]
      },
      "elasticPolicy": {"minRanks": 2, "maxRanks": 6, "growCooldownSeconds": 120, "minGrowthPercent": 10},
      "planning": {"allocator": "greedy", "precision": "bf16", "lowPrecision": "fp8", "stepTimeTarget": "250ms",
                   "indicator": "weight-error", "batchMoves": true, "profiles": "qsync-profile-",
                   "calibration": "cnn.calib.json"},
      "runPolicy": {"backoffLimit": 5, "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 600,
                    "cleanPodPolicy": "All", "suspend": true, "managedBy": "kueue.x-k8s.io/multikueue",
                    "schedulingPolicy": {"gang": "coscheduling", "scheduleTimeoutSeconds": 300}}
    },
    "status": {
      "phase": "Running", "message": "2 of 5 ranks running", "observedGeneration": 2,
      "conditions": [{"type": "Running", "status": "True", "reason": "PodsRunning", "message": "all up",
                      "lastTransitionTime": "2025-01-31T12:00:00Z", "observedGeneration": 2}],
      "plan": {"strategy": "greedy", "predictedStepSeconds": 0.31, "stepTimeTargetSeconds": 0.25,
               "configMap": "big-plan",
               "ranks": [{"rank": 0, "node": "n1", "deviceClass": "a100", "precisionMix": "fp32:4 int8:2",
                          "localBatch": 96, "predictedStepSeconds": 0.3}]},
      "replicas": {"total": 5, "active": 2, "succeeded": 0, "failed": 1},
      "restarts": 1, "lastCheckpointStep": 40,
      "startTime": "2025-01-31T11:59:00Z",
      "borrowedDevices": 3, "resizes": 2,
      "lastResize": {"time": "2025-01-31T12:01:00Z", "reason": "PoolGrew", "message": "the pool offers t4@n2",
                     "fromRanks": 2, "toRanks": 5, "checkpointStep": 40},
      "lending": [{"entry": "t4", "workload": "StatefulSet/chat", "state": "Lent", "reason": "Lending",
                   "message": "3 of 5 replicas lent", "servingReplicas": 5, "targetReplicas": 2, "readyReplicas": 2,
                   "neededReplicas": 2, "borrowedDevices": 3, "reclaimTargetReplicas": 0, "reclaims": 4,
                   "reclaimsMissed": 1, "demand": 37.5, "lastChangeTime": "2025-01-31T12:00:30.250000Z",
                   "reclaimStartTime": "2025-01-31T12:02:00.5Z", "reclaimReason": "DemandHigh",
                   "lastReclaimSeconds": 41.25}]
    }})J");
}

std::string error_of(const json& object) {
  try {
    (void)hybrid_training_job_from_json(object);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(HybridTrainingJob, FullObjectRoundTripsThroughTheStructs) {
  const json in = full_job();
  const HybridTrainingJob job = hybrid_training_job_from_json(in);
  EXPECT_EQ(job.name(), "big");
  EXPECT_EQ(job.namespace_name(), "ml");
  EXPECT_EQ(job.spec.model.config_map->key, "net.yaml");
  EXPECT_EQ(job.spec.data.volume->claim_name, "datasets");
  EXPECT_DOUBLE_EQ(*job.spec.epochs, 1.5);
  EXPECT_FALSE(job.spec.steps.has_value());
  EXPECT_EQ(job.spec.pool.training[0].memory_budget_bytes, 40ll << 30);
  EXPECT_EQ(job.spec.pool.inference[0].gpus_per_rank, 0);
  EXPECT_TRUE(job.spec.pool.inference[0].off_peak_only);
  const BorrowSpec& borrow = *job.spec.pool.inference[0].borrow;
  EXPECT_EQ(borrow.workload.kind, "StatefulSet");
  EXPECT_EQ(borrow.windows[0].time_zone, "America/New_York");
  EXPECT_DOUBLE_EQ(borrow.demand->queueing->service_time_seconds, 0.2);
  EXPECT_DOUBLE_EQ(borrow.demand->queueing->wait_target_seconds, 0.05);
  EXPECT_EQ(job.spec.elastic_policy->max_ranks, 6);
  EXPECT_EQ(job.status->lending[0].reclaims_missed, 1);
  EXPECT_EQ(job.status->last_resize->to_ranks, 5);
  EXPECT_EQ(job.spec.pool.local[0].memory_budget_bytes, 1ll << 30);
  EXPECT_DOUBLE_EQ(job.spec.planning.step_time_target_seconds, 0.25);
  EXPECT_EQ(job.spec.run_policy.active_deadline_seconds, 3600);
  EXPECT_EQ(job.spec.run_policy.managed_by, "kueue.x-k8s.io/multikueue");
  EXPECT_EQ(job.spec.run_policy.scheduling_policy->gang, "coscheduling");
  EXPECT_EQ(job.spec.run_policy.scheduling_policy->schedule_timeout_seconds, 300);
  ASSERT_TRUE(job.status.has_value());
  EXPECT_EQ(job.status->plan->ranks[0].precision_mix, "fp32:4 int8:2");
  EXPECT_EQ(job.status->conditions[0].last_transition_time, "2025-01-31T12:00:00Z");

  // Every field was given, so nothing is defaulted: JSON -> struct -> JSON is the identity...
  EXPECT_EQ(to_json(job), in) << to_json(job).dump(2);
  // ...and struct -> JSON -> struct too.
  EXPECT_EQ(hybrid_training_job_from_json(to_json(job)), job);
}

TEST(HybridTrainingJob, MinimalObjectGetsTheCrdDefaults) {
  const HybridTrainingJob job = hybrid_training_job_from_json(minimal_job());
  const HybridTrainingJobSpec& s = job.spec;
  EXPECT_EQ(job.generation(), 3);
  EXPECT_EQ(s.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 0.001);
  EXPECT_EQ(s.optimizer.schedule, "cosine");
  EXPECT_EQ(s.global_batch, 128);
  EXPECT_EQ(s.seed, 1);
  EXPECT_EQ(s.checkpoint.interval_steps, 100);
  EXPECT_EQ(s.checkpoint.keep, 2);
  EXPECT_EQ(s.image, "ghcr.io/qsync/qsync-worker:0.1.0");
  EXPECT_EQ(s.pool.training[0].count, 1);
  EXPECT_FALSE(s.pool.training[0].gpus_per_rank.has_value());
  EXPECT_EQ(s.planning.allocator, "exact");
  EXPECT_EQ(s.planning.precision, "fp32");
  EXPECT_EQ(s.planning.low_precision, "int8");
  EXPECT_EQ(s.planning.indicator, "bidirectional");
  EXPECT_EQ(s.run_policy.backoff_limit, 3);
  EXPECT_EQ(s.run_policy.clean_pod_policy, "Running");
  EXPECT_FALSE(s.run_policy.suspend);
  EXPECT_EQ(s.run_policy.managed_by, "qsync.dev/operator");
  EXPECT_FALSE(job.status.has_value());

  // The struct's JSON is the input with the table's defaults filled in, nothing else.
  json defaulted = minimal_job()["spec"];
  apply_field_defaults(job_spec_fields(), "spec", defaulted);
  EXPECT_EQ(to_json(s), defaulted) << to_json(s).dump(2) << "\nvs\n" << defaulted.dump(2);
}

TEST(HybridTrainingJob, StructDefaultsMatchTheTableDefaults) {
  // A spec struct built in C++ (no JSON) must mean what the CRD's defaults mean.
  HybridTrainingJobSpec built;
  built.model.zoo = "cnn";
  built.steps = 300;
  PoolEntry train;
  train.name = "train";
  train.node_selector = {{"qsync.dev/pool", "training"}};
  built.pool.training.push_back(train);
  EXPECT_EQ(built, hybrid_training_job_from_json(minimal_job()).spec);
}

TEST(HybridTrainingJob, StatusRoundTrips) {
  HybridTrainingJobStatus status;
  status.phase = PHASE_SUCCEEDED;
  status.observed_generation = 4;
  status.conditions.push_back({"Succeeded", "True", "AllRanksSucceeded", "300 steps", "2025-02-01T00:00:00Z", 4});
  status.plan = PlanSummary{"exact", 0.5, 0, "j-plan", {{0, "n1", "a100", "fp32:6", 64, 0.5}, {1, "n2", "t4", "int8:6", 64, 0.49}}};
  status.replicas = {2, 0, 2, 0};
  status.last_checkpoint_step = 300;
  status.completion_time = "2025-02-01T00:00:00Z";
  EXPECT_EQ(hybrid_training_job_status_from_json(to_json(status)), status);
  EXPECT_EQ(hybrid_training_job_status_from_json(json(nullptr)), HybridTrainingJobStatus{});
}

TEST(HybridTrainingJob, BadStatusNamesTheField) {
  const json status = {{"phase", "Exploded"}, {"conditions", json::array({{{"type", "Running"}, {"status", "Yes"}}})}};
  try {
    (void)hybrid_training_job_status_from_json(status);
    FAIL() << "accepted an unknown phase";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("status.phase: \"Exploded\" is not one of Pending"), std::string::npos) << m;
    EXPECT_NE(m.find("status.conditions[0].status: \"Yes\" is not one of True, False, Unknown"), std::string::npos) << m;
    EXPECT_NE(m.find("status.conditions[0].lastTransitionTime is missing"), std::string::npos) << m;
  }
}

// Found by tests/fuzz (hybrid_training_job): apiVersion, kind or metadata fields of another JSON
// type escaped as nlohmann's type_error; each is refused naming the field.
TEST(HybridTrainingJob, TopLevelFieldsOfAnotherTypeAreRefusedNamingThem) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"apiVersion", "qsync.dev/v1alpha1"}, {"kind", {{"spec", 1}}}}, "expected apiVersion"},
      {{{"apiVersion", 3}}, "expected apiVersion"},
      {{{"metadata", "fm"}}, "metadata must be a mapping"},
      {{{"metadata", {{"name", {{"a", 1}}}}}}, "metadata.name must be a string"},
      {{{"metadata", {{"name", "fm"}, {"namespace", 5}}}}, "metadata.namespace must be a string"},
      {{{"metadata", {{"name", "fm"}, {"generation", "2"}}}}, "metadata.generation must be an integer"},
  };
  for (const auto& [object, expected] : cases) {
    SCOPED_TRACE(object.dump());
    try {
      (void)hybrid_training_job_from_json(object);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

struct InvalidCase {
  const char* what;
  const char* patch;     // JSON merge patch applied to minimal_job()["spec"]
  const char* expected;  // a substring of the message
};

class InvalidSpec : public testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidSpec, IsRefusedNamingTheField) {
  json job = minimal_job();
  job["spec"].merge_patch(json::parse(GetParam().patch));
  const std::string message = error_of(job);
  ASSERT_FALSE(message.empty()) << GetParam().what << " was accepted";
  EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  EXPECT_NE(message.find("HybridTrainingJob team-a/fmnist"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidSpec,
    testing::Values(
        InvalidCase{"negative globalBatch", R"({"globalBatch": -5})", "spec.globalBatch must be at least 1, got -5"},
        InvalidCase{"zero globalBatch", R"({"globalBatch": 0})", "spec.globalBatch must be at least 1, got 0"},
        InvalidCase{"fractional globalBatch", R"({"globalBatch": 1.5})", "spec.globalBatch must be an integer, got 1.5"},
        InvalidCase{"unknown allocator", R"({"planning": {"allocator": "fastest"}})",
                    "spec.planning.allocator: \"fastest\" is not one of exact, greedy, uniform, uniform-low-weak, dynamic-batching"},
        InvalidCase{"unknown precision", R"({"planning": {"precision": "fp4"}})",
                    "spec.planning.precision: \"fp4\" is not one of fp32, tf32, bf16, fp16, int8, int8-all, fp8"},
        InvalidCase{"steps and epochs", R"({"epochs": 2})", "spec.steps and spec.epochs are both set: keep one"},
        InvalidCase{"neither steps nor epochs", R"({"steps": null})", "set spec.steps or spec.epochs"},
        InvalidCase{"zero epochs", R"({"steps": null, "epochs": 0})", "spec.epochs must be greater than 0, got 0"},
        InvalidCase{"empty pool", R"({"pool": {"training": []}})", "spec.pool needs at least one training or inference entry"},
        InvalidCase{"local-only pool", R"({"pool": {"training": null, "local": [{"deviceClass": "cpu-avx2"}]}})",
                    "spec.pool needs at least one training or inference entry"},
        InvalidCase{"bad duration", R"({"planning": {"stepTimeTarget": "2 hours"}})",
                    "spec.planning.stepTimeTarget: \"2 hours\" is not a duration such as 250ms, 1.5s or 2m"},
        InvalidCase{"zero duration", R"({"planning": {"stepTimeTarget": "0ms"}})",
                    "spec.planning.stepTimeTarget: '0ms' is not a positive duration"},
        InvalidCase{"bad memory budget", R"({"pool": {"training": [{"name": "t", "memoryBudget": "lots"}]}})",
                    "spec.pool.training[0].memoryBudget: \"lots\" is not a quantity such as 16Gi or 512Mi"},
        InvalidCase{"CPU millis as memory", R"({"pool": {"training": [{"name": "t", "memoryBudget": "500m"}]}})",
                    "spec.pool.training[0].memoryBudget: '500m' is not a memory quantity"},
        InvalidCase{"negative lr", R"({"optimizer": {"lr": -0.1}})", "spec.optimizer.lr must be greater than 0, got -0.1"},
        InvalidCase{"two model sources", R"({"model": {"file": "m.yaml"}})", "spec.model: set exactly one of zoo"},
        InvalidCase{"no model", R"({"model": null})", "spec.model is missing"},
        InvalidCase{"data path and volume", R"({"data": {"path": "/d", "volume": {"claimName": "c"}}})",
                    "spec.data: set path or volume, not both"},
        InvalidCase{"volume without claim", R"({"data": {"volume": {"path": "x"}}})", "spec.data.volume.claimName is missing"},
        InvalidCase{"unknown field", R"({"optimizer": {"lrate": 0.1}})", "unknown field \"lrate\" in spec.optimizer (known: "},
        InvalidCase{"bad cleanPodPolicy", R"({"runPolicy": {"cleanPodPolicy": "Some"}})",
                    "spec.runPolicy.cleanPodPolicy: \"Some\" is not one of None, Running, All"},
        InvalidCase{"negative backoffLimit", R"({"runPolicy": {"backoffLimit": -1}})", "spec.runPolicy.backoffLimit must be at least 0"},
        InvalidCase{"zero deadline", R"({"runPolicy": {"activeDeadlineSeconds": 0}})",
                    "spec.runPolicy.activeDeadlineSeconds must be at least 1"},
        InvalidCase{"count zero", R"({"pool": {"training": [{"name": "t", "count": 0}]}})",
                    "spec.pool.training[0].count must be at least 1, got 0"},
        InvalidCase{"pool entry without a name", R"({"pool": {"training": [{"count": 2}]}})",
                    "spec.pool.training[0].name is missing"},
        InvalidCase{"pool entry name not a DNS label", R"({"pool": {"training": [{"name": "Train_A"}]}})",
                    "spec.pool.training[0].name: \"Train_A\" is not a lower-case DNS label"},
        InvalidCase{"duplicate entry names", R"({"pool": {"inference": [{"name": "train"}]}})",
                    "the entry name \"train\" is used twice"},
        InvalidCase{"numeric node selector value", R"({"pool": {"training": [{"name": "t", "nodeSelector": {"gpu": 1}}]}})",
                    "spec.pool.training[0].nodeSelector.gpu must be a string, got 1"},
        InvalidCase{"bad resource quantity", R"({"resources": {"limits": {"memory": "a lot"}}})",
                    "spec.resources.limits.memory: \"a lot\" is not a quantity"},
        InvalidCase{"empty image", R"({"image": ""})", "spec.image must not be empty"},
        InvalidCase{"bad pull policy", R"({"imagePullPolicy": "Sometimes"})", "spec.imagePullPolicy: \"Sometimes\" is not one of"},
        InvalidCase{"wrong type", R"({"steps": "300"})", "spec.steps must be an integer, got \"300\""},
        // Off-peak borrowing (planner/job_borrow_spec.h).
        InvalidCase{"offPeakOnly without borrow", R"({"pool": {"inference": [{"name": "i", "offPeakOnly": true}]}})",
                    "spec.pool.inference[0].offPeakOnly needs spec.pool.inference[0].borrow"},
        InvalidCase{"borrow on a training entry",
                    R"({"pool": {"training": [{"name": "t", "borrow": {"workload": {"name": "chat"}, "windows": []}}]}})",
                    "unknown field \"borrow\" in spec.pool.training[0]"},
        InvalidCase{"borrow without a workload",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"windows": [{"start": "0 20 * * *", "end": "0 7 * * *"}]}}]}})",
                    "spec.pool.inference[0].borrow.workload is missing"},
        InvalidCase{"workload name and selector",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "a", "selector": {"app": "a"}},
                        "windows": [{"start": "0 20 * * *", "end": "0 7 * * *"}]}}]}})",
                    "spec.pool.inference[0].borrow.workload: set exactly one of name or selector"},
        InvalidCase{"borrow without windows or demand",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "chat"}}}]}})",
                    "say when lending is allowed: give windows, demand, or both"},
        InvalidCase{"cron with 4 fields",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "chat"},
                        "windows": [{"start": "0 20 * *", "end": "0 7 * * *"}]}}]}})",
                    "spec.pool.inference[0].borrow.windows[0].start: \"0 20 * *\" is not a cron expression of 5 fields"},
        InvalidCase{"two demand sizings",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "chat"},
                        "demand": {"prometheus": {"query": "x"}, "threshold": 5, "requestsPerReplica": 10}}}]}})",
                    "set exactly one of threshold, requestsPerReplica or queueing, got 2"},
        InvalidCase{"demand without a query",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "chat"},
                        "demand": {"prometheus": {}, "threshold": 5}}}]}})",
                    "spec.pool.inference[0].borrow.demand.prometheus.query is missing"},
        InvalidCase{"queueing quantile 1",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"name": "chat"},
                        "demand": {"prometheus": {"query": "x"}, "queueing": {"serviceTime": "200ms", "waitTarget": "50ms",
                        "waitQuantile": 1}}}}]}})",
                    "waitQuantile must be below 1"},
        InvalidCase{"unknown workload kind",
                    R"({"pool": {"inference": [{"name": "i", "borrow": {"workload": {"kind": "ReplicaSet", "name": "x"},
                        "windows": [{"start": "0 20 * * *", "end": "0 7 * * *"}]}}]}})",
                    "spec.pool.inference[0].borrow.workload.kind: \"ReplicaSet\" is not one of Deployment, StatefulSet"},
        // Gang scheduling (planner/job_scheduling_policy.h).
        InvalidCase{"unknown gang scheduler", R"({"runPolicy": {"schedulingPolicy": {"gang": "yunikorn"}}})",
                    "spec.runPolicy.schedulingPolicy.gang: \"yunikorn\" is not one of coscheduling"},
        InvalidCase{"schedulingPolicy without gang", R"({"runPolicy": {"schedulingPolicy": {"scheduleTimeoutSeconds": 60}}})",
                    "spec.runPolicy.schedulingPolicy.gang is missing"},
        InvalidCase{"zero schedule timeout",
                    R"({"runPolicy": {"schedulingPolicy": {"gang": "coscheduling", "scheduleTimeoutSeconds": 0}}})",
                    "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds must be at least 1, got 0"},
        InvalidCase{"pod-group label in a podTemplate",
                    R"({"runPolicy": {"schedulingPolicy": {"gang": "coscheduling"}},
                        "podTemplate": {"labels": {"scheduling.x-k8s.io/pod-group": "mine"}}})",
                    "spec.podTemplate.labels: \"scheduling.x-k8s.io/pod-group\" names the job's PodGroup"},
        InvalidCase{"minRanks above maxRanks", R"({"elasticPolicy": {"minRanks": 4, "maxRanks": 2}})",
                    "spec.elasticPolicy: minRanks 4 is above maxRanks 2"}),
    [](const testing::TestParamInfo<InvalidCase>& info) {
      std::string name;
      for (const char* c = info.param.what; *c; ++c) name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
      return name;
    });

TEST(HybridTrainingJob, AllProblemsAreReportedTogether) {
  json job = minimal_job();
  job["spec"]["globalBatch"] = -1;
  job["spec"]["planning"] = {{"allocator", "fastest"}};
  const std::string message = error_of(job);
  EXPECT_NE(message.find("spec.globalBatch"), std::string::npos) << message;
  EXPECT_NE(message.find("spec.planning.allocator"), std::string::npos) << message;
}

TEST(HybridTrainingJob, WrongKindOrMissingNameIsRefused) {
  json job = minimal_job();
  job["kind"] = "PyTorchJob";
  EXPECT_NE(error_of(job).find("expected apiVersion qsync.dev/v1alpha1 and kind HybridTrainingJob"), std::string::npos);
  job = minimal_job();
  job["metadata"].erase("name");
  EXPECT_NE(error_of(job).find("metadata.name is missing"), std::string::npos);
  job = minimal_job();
  job.erase("spec");
  EXPECT_NE(error_of(job).find("spec is missing"), std::string::npos);
}

}  // namespace
}  // namespace qsync::api
