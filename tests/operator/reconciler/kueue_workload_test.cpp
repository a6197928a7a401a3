// File: tests/operator/reconciler/kueue_workload_test.cpp
// The pure parts of the Kueue integration (kueue_workload.h): the Workload's name and pod sets,
// equivalence that ignores what admission adds, Kueue's status read back, PodsReady's
// transitions, flavors merged into a job and put back exactly, a contradicting label refused,
// and the quota release.
#include "operator/reconciler/kueue_workload.h"

#include <gtest/gtest.h>

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json job_object() {
  json spec = {{"model", {{"zoo", "cnn"}}},
               {"steps", 20},
               {"globalBatch", 64},
               {"pool",
                {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"qsync.dev/pool", "training"}}}, {"count", 2}}})},
                 {"inference", json::array({{{"name", "infer"},
                                             {"nodeSelector", {{"qsync.dev/pool", "inference"}}},
                                             {"deviceClass", "cpu-avx2"},
                                             {"podTemplate", {{"nodeSelector", {{"zone", "a"}}}}}}})}}}};
  return {{"apiVersion", "qsync.dev/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "fm"}, {"namespace", "default"}, {"uid", "u-1"}, {"labels", {{"kueue.x-k8s.io/queue-name", "q"}}}}},
          {"spec", spec}};
}
const json GPU_TOLERATIONS = json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});

json desired() {
  const json o = job_object();
  return desired_kueue_workload(o, api::hybrid_training_job_from_json(o), GPU_TOLERATIONS);
}

TEST(KueueWorkload, NameHasKueuesShapeAndIsStable) {
  const std::string a = kueue_workload_name("fm", "u-1");
  EXPECT_EQ(a.rfind("hybridtrainingjob-fm-", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("hybridtrainingjob-fm-").size() + 5);
  EXPECT_EQ(a, kueue_workload_name("fm", "u-1"));
  EXPECT_NE(a, kueue_workload_name("fm", "u-2"));  // a job recreated under the same name gets another
}

TEST(KueueWorkload, OnePodSetPerEntryWithWhatKueueMatchesFlavorsOn) {
  const json wl = desired();
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["spec"]["queueName"], "q");
  ASSERT_EQ(wl["spec"]["podSets"].size(), 2u);
  const json& train = wl["spec"]["podSets"][0];
  EXPECT_EQ(train["count"], 2);
  EXPECT_EQ(train["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(train["template"]["spec"]["tolerations"], GPU_TOLERATIONS);
  const json& infer = wl["spec"]["podSets"][1];  // a CPU class: no GPU, no GPU toleration
  EXPECT_FALSE(infer["template"]["spec"]["containers"][0]["resources"]["requests"].contains("nvidia.com/gpu"));
  EXPECT_TRUE(infer["template"]["spec"]["tolerations"].empty());
  EXPECT_EQ(infer["template"]["spec"]["nodeSelector"], json({{"qsync.dev/pool", "inference"}, {"zone", "a"}}));
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], "u-1");
}

TEST(KueueWorkload, AnEntryNameThatIsNoDnsLabelIsRefusedNamingIt) {
  json o = job_object();
  o["spec"]["pool"]["training"][0]["name"] = "Train_A";
  try {
    desired_kueue_workload(o, api::hybrid_training_job_from_json(o), GPU_TOLERATIONS);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"Train_A\""), std::string::npos) << e.what();
  }
}

TEST(KueueWorkload, EquivalenceIgnoresSelectorsButNotCountsOrRequests) {
  json live = desired();
  live["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"]["flavor"] = "spot";
  EXPECT_TRUE(kueue_workload_equivalent(live, desired()));
  live["spec"]["podSets"][0]["count"] = 3;
  EXPECT_FALSE(kueue_workload_equivalent(live, desired()));
  live = desired();
  live["spec"]["podSets"][1]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2";
  EXPECT_FALSE(kueue_workload_equivalent(live, desired()));
  live = desired();
  live["spec"]["queueName"] = "other";
  EXPECT_FALSE(kueue_workload_equivalent(live, desired()));
}

json admitted_workload() {
  json wl = desired();
  wl["status"] = {{"admission", {{"clusterQueue", "cq"},
                                 {"podSetAssignments", json::array({{{"name", "train"}, {"flavors", {{"nvidia.com/gpu", "a100"}, {"cpu", "a100"}}}},
                                                                    {{"name", "infer"}, {"flavors", {{"cpu", "cpu-nodes"}}}}})}}},
                  {"conditions", json::array({{{"type", "QuotaReserved"}, {"status", "True"}},
                                              {{"type", "Admitted"}, {"status", "True"}}})}};
  return wl;
}

TEST(KueueWorkload, StateReadsAdmissionEvictionAndFinish) {
  EXPECT_FALSE(kueue_state(desired()).admitted);
  json wl = admitted_workload();
  KueueState s = kueue_state(wl);
  EXPECT_TRUE(s.admitted);
  EXPECT_EQ(s.cluster_queue, "cq");
  EXPECT_EQ(s.flavors["train"], std::set<std::string>{"a100"});
  set_kueue_condition(wl, "Evicted", true, "Preempted", "by job x", "2026-12-02T10:00:00Z");
  s = kueue_state(wl);
  EXPECT_FALSE(s.admitted);
  EXPECT_TRUE(s.evicted);
  EXPECT_EQ(s.evicted_reason, "Preempted");
  const json released = released_workload(wl, "2026-12-02T10:01:00Z");
  EXPECT_FALSE(released["status"].contains("admission"));
  const KueueState r = kueue_state(released);
  EXPECT_FALSE(r.quota_reserved);
  EXPECT_FALSE(r.has_admission);
  EXPECT_TRUE(kueue_state(finished_workload(admitted_workload(), "Succeeded", "done", "t")).finished);
  EXPECT_FALSE(kueue_state(finished_workload(admitted_workload(), "Succeeded", "done", "t")).admitted);
}

TEST(KueueWorkload, PodsReadyFollowsThePodsAndIsWrittenOnlyOnAChange) {
  json wl = admitted_workload();
  auto reason = [](const json& w) {
    for (const json& c : w["status"]["conditions"])
      if (c["type"] == "PodsReady") return c["status"].get<std::string>() + "/" + c["reason"].get<std::string>();
    return std::string("<absent>");
  };
  std::optional<json> next = pods_ready_workload(wl, 1, 2, "t0");
  ASSERT_TRUE(next);
  EXPECT_EQ(reason(*next), "False/WaitForStart");
  EXPECT_FALSE(pods_ready_workload(*next, 1, 2, "t1"));  // unchanged: nothing to write
  next = pods_ready_workload(*next, 2, 2, "t2");
  ASSERT_TRUE(next);
  EXPECT_EQ(reason(*next), "True/Started");
  next = pods_ready_workload(*next, 1, 2, "t3");  // a rank lost
  ASSERT_TRUE(next);
  EXPECT_EQ(reason(*next), "False/WaitForRecovery");
  next = pods_ready_workload(*next, 2, 2, "t4");
  ASSERT_TRUE(next);
  EXPECT_EQ(reason(*next), "True/Recovered");
  EXPECT_FALSE(pods_ready_workload(*next, 3, 2, "t5"));
  EXPECT_EQ(reason(*pods_ready_workload(wl, 0, 0, "t6")), "False/WaitForStart");  // no plan yet: not ready
}

TEST(KueueWorkload, AdmissionMergesFlavorsAndEvictionPutsTheEntriesBackExactly) {
  PodSetInfo train, infer;
  ASSERT_FALSE(add_flavor(train, {{"metadata", {{"name", "a100"}}},
                                  {"spec", {{"nodeLabels", {{"gpu", "a100"}}},
                                            {"tolerations", json::array({{{"key", "spot"}, {"operator", "Exists"}}})}}}}));
  ASSERT_FALSE(add_flavor(infer, {{"metadata", {{"name", "cpu-nodes"}}}, {"spec", {{"nodeLabels", {{"pool", "cpu"}}}}}}));
  const json original = job_object();
  json o = original;
  ASSERT_FALSE(admitted_job(o, {{"train", train}, {"infer", infer}}));
  EXPECT_EQ(o["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(o["spec"]["pool"]["training"][0]["podTemplate"]["nodeSelector"], json({{"gpu", "a100"}}));
  EXPECT_EQ(o["spec"]["pool"]["training"][0]["podTemplate"]["tolerations"][0]["key"], "spot");
  EXPECT_EQ(o["spec"]["pool"]["inference"][0]["podTemplate"]["nodeSelector"], json({{"zone", "a"}, {"pool", "cpu"}}));
  json again = o;  // admitted a second time: the entries' own values are still the originals
  ASSERT_FALSE(admitted_job(again, {{"train", train}}));
  EXPECT_EQ(again["metadata"]["annotations"], o["metadata"]["annotations"]);
  evicted_job(o);
  json expected = original;
  expected["spec"]["runPolicy"]["suspend"] = true;
  expected["metadata"]["annotations"] = json::object();
  EXPECT_EQ(o, expected) << o.dump(1);
}

TEST(KueueWorkload, AFlavorLabelTheEntryContradictsIsRefusedAndChangesNothing) {
  PodSetInfo infer;
  ASSERT_FALSE(add_flavor(infer, {{"metadata", {{"name", "zone-b"}}}, {"spec", {{"nodeLabels", {{"zone", "b"}}}}}}));
  json o = job_object();
  const std::optional<std::string> error = admitted_job(o, {{"infer", infer}});
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("zone=b"), std::string::npos) << *error;
  EXPECT_EQ(o, job_object());
  PodSetInfo two;  // two flavors of one pod set that disagree
  ASSERT_FALSE(add_flavor(two, {{"metadata", {{"name", "x"}}}, {"spec", {{"nodeLabels", {{"k", "1"}}}}}}));
  EXPECT_TRUE(add_flavor(two, {{"metadata", {{"name", "y"}}}, {"spec", {{"nodeLabels", {{"k", "2"}}}}}}));
}

}  // namespace
}  // namespace qsync::reconciler
