// File: tests/kube_api_server/workload_controllers_test.cpp
// The test server's apps/v1 controllers and GPU scheduler through its in-process call() (no
// kubelet: the tests mark Pods Ready themselves): a Deployment creates, replaces and removes
// its Pods and reports readiness; /scale reads and writes replicas (GET, PATCH, PUT with a stale
// resourceVersion); scale-in removes unbound Pods first; a StatefulSet creates and removes
// ordinals in order (OrderedReady) or at once (Parallel); GPU Pods are spread over Nodes by free
// nvidia.com/gpu, honour node affinity and taints, wait Unschedulable with the scheduler's message, and
// bind once GPUs are freed. Without the controllers option nothing runs but /scale.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_server.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;

ServerOptions with_controllers() {
  ServerOptions o;
  o.controllers = true;
  return o;
}

json deployment(const std::string& name, int64_t replicas, int64_t gpus = 0) {
  json container = {{"name", "serve"}, {"image", "serve:1"}, {"command", json::array({"/bin/false"})}};
  if (gpus > 0) container["resources"] = {{"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}};
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"replicas", replicas},
            {"selector", {{"matchLabels", {{"app", name}}}}},
            {"template", {{"metadata", {{"labels", {{"app", name}}}}}, {"spec", {{"containers", json::array({container})}}}}}}}};
}

json gpu_node(const std::string& name, int64_t gpus, const json& labels = json::object()) {
  json meta = {{"name", name}, {"labels", labels}};
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", meta},
          {"status",
           {{"allocatable", {{"nvidia.com/gpu", std::to_string(gpus)}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

class WorkloadControllersTest : public ::testing::Test {
 protected:
  WorkloadControllersTest() : server_(with_controllers()) {}

  std::vector<json> pods(const std::string& app) {
    std::vector<json> out;
    for (json& p : server_.list_objects("v1", "pods", "default"))
      if (p["metadata"]["labels"].value("app", "") == app) out.push_back(std::move(p));
    return out;
  }
  void mark_ready(const json& pod) {
    json p = pod;
    p["status"] = {{"phase", "Running"}, {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
    server_.put_object(p);
  }
  json deploy(const std::string& name) { return server_.get_object("apps/v1", "deployments", "default", name); }
  json call(const std::string& method, const std::string& target, const json& body = nullptr,
            const std::string& type = "application/merge-patch+json", int* status = nullptr) {
    std::map<std::string, std::string> headers;
    if (!body.is_null()) headers["Content-Type"] = type;
    auto res = server_.call(method, target, body.is_null() ? "" : body.dump(), headers);
    if (status != nullptr) *status = res.status;
    return json::parse(res.body, nullptr, false);
  }

  ApiServer server_;
};

TEST_F(WorkloadControllersTest, DeploymentRunsItsReplicasAndReportsReadiness) {
  server_.put_object(deployment("chat", 3));
  std::vector<json> p = pods("chat");
  ASSERT_EQ(p.size(), 3u);
  const json d = deploy("chat");
  for (const json& pod : p) {
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], d["metadata"]["uid"]);
    EXPECT_TRUE(pod["metadata"]["ownerReferences"][0]["controller"].get<bool>());
    EXPECT_EQ(pod["metadata"]["name"].get<std::string>().rfind("chat-", 0), 0u);
    EXPECT_TRUE(pod["metadata"]["labels"].contains("pod-template-hash"));
  }
  EXPECT_EQ(deploy("chat")["status"]["replicas"], 3);
  EXPECT_EQ(deploy("chat")["status"]["readyReplicas"], 0);
  for (const json& pod : p) mark_ready(pod);
  EXPECT_EQ(deploy("chat")["status"]["readyReplicas"], 3);
  EXPECT_EQ(deploy("chat")["status"]["conditions"][0]["status"], "True");
  // A failed Pod is replaced.
  json failed = p[0];
  failed["status"] = {{"phase", "Failed"}};
  server_.put_object(failed);
  EXPECT_EQ(pods("chat").size(), 3u);
  EXPECT_TRUE(server_.get_object("v1", "pods", "default", p[0]["metadata"]["name"]).is_null());
}

TEST_F(WorkloadControllersTest, ScaleSubresourceReadsAndWritesReplicas) {
  server_.put_object(deployment("chat", 3));
  const std::string scale = "/apis/apps/v1/namespaces/default/deployments/chat/scale";
  json s = call("GET", scale);
  EXPECT_EQ(s["kind"], "Scale");
  EXPECT_EQ(s["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(s["spec"]["replicas"], 3);
  EXPECT_EQ(s["status"]["selector"], "app=chat");
  s = call("PATCH", scale, {{"spec", {{"replicas", 1}}}});
  EXPECT_EQ(s["spec"]["replicas"], 1);
  EXPECT_EQ(deploy("chat")["spec"]["replicas"], 1);
  EXPECT_EQ(pods("chat").size(), 1u) << "no kubelet: surplus Pods are removed at once";
  int status = 0;
  call("PUT", scale, {{"metadata", {{"resourceVersion", "1"}}}, {"spec", {{"replicas", 4}}}}, "application/json", &status);
  EXPECT_EQ(status, 409);
  call("PUT", scale, {{"spec", {{"replicas", -1}}}}, "application/json", &status);
  EXPECT_EQ(status, 422);
  s = call("PUT", scale, {{"spec", {{"replicas", 2}}}}, "application/json", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(pods("chat").size(), 2u);
  const json resources = call("GET", "/apis/apps/v1")["resources"];
  bool listed = false;
  for (const json& r : resources) listed = listed || (r["name"] == "deployments/scale" && r["kind"] == "Scale");
  EXPECT_TRUE(listed) << resources.dump();
}

TEST_F(WorkloadControllersTest, StatefulSetOrderedAndParallel) {
  json set = deployment("db", 3);
  set["kind"] = "StatefulSet";
  set["spec"]["serviceName"] = "db";
  server_.put_object(set);
  ASSERT_EQ(pods("db").size(), 1u) << "OrderedReady: db-1 waits for db-0";
  json zero = server_.get_object("v1", "pods", "default", "db-0");
  EXPECT_EQ(zero["spec"]["hostname"], "db-0");
  EXPECT_EQ(zero["spec"]["subdomain"], "db");
  mark_ready(zero);
  mark_ready(server_.get_object("v1", "pods", "default", "db-1"));
  ASSERT_EQ(pods("db").size(), 3u);
  mark_ready(server_.get_object("v1", "pods", "default", "db-2"));
  EXPECT_EQ(server_.get_object("apps/v1", "statefulsets", "default", "db")["status"]["readyReplicas"], 3);
  call("PATCH", "/apis/apps/v1/namespaces/default/statefulsets/db/scale", {{"spec", {{"replicas", 1}}}});
  EXPECT_TRUE(server_.get_object("v1", "pods", "default", "db-2").is_null());
  EXPECT_TRUE(server_.get_object("v1", "pods", "default", "db-1").is_null());
  EXPECT_FALSE(server_.get_object("v1", "pods", "default", "db-0").is_null());

  json parallel = deployment("cache", 3);
  parallel["kind"] = "StatefulSet";
  parallel["spec"]["podManagementPolicy"] = "Parallel";
  server_.put_object(parallel);
  EXPECT_EQ(pods("cache").size(), 3u);
}

TEST_F(WorkloadControllersTest, GpuPodsAreScheduledByFreeGpus) {
  server_.put_object(gpu_node("gpu-a", 2));
  server_.put_object(gpu_node("gpu-b", 2));
  server_.put_object(deployment("llm", 5, 1));
  int bound = 0, waiting = 0;
  std::map<std::string, int> per_node;
  std::string message;
  for (const json& p : pods("llm")) {
    const std::string node = p["spec"].value("nodeName", "");
    if (!node.empty()) {
      ++bound;
      per_node[node]++;
    } else {
      ++waiting;
      ASSERT_EQ(p["status"]["conditions"][0]["reason"], "Unschedulable") << p.dump();
      message = p["status"]["conditions"][0]["message"];
    }
  }
  EXPECT_EQ(bound, 4);
  EXPECT_EQ(waiting, 1);
  EXPECT_EQ(per_node, (std::map<std::string, int>{{"gpu-a", 2}, {"gpu-b", 2}}));
  EXPECT_EQ(message, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
  // Scaling in removes the unbound Pod first.
  call("PATCH", "/apis/apps/v1/namespaces/default/deployments/llm/scale", {{"spec", {{"replicas", 4}}}});
  for (const json& p : pods("llm")) EXPECT_FALSE(p["spec"].value("nodeName", "").empty());
  // A bound Pod goes (no kubelet: at once); its replacement takes the freed GPU.
  const json first = pods("llm")[0];
  call("DELETE", "/api/v1/namespaces/default/pods/" + first["metadata"]["name"].get<std::string>());
  ASSERT_EQ(pods("llm").size(), 4u);
  for (const json& p : pods("llm")) EXPECT_FALSE(p["spec"].value("nodeName", "").empty()) << p.dump();
}

// kube-scheduler's TaintToleration filter: NoSchedule/NoExecute taints keep untolerating Pods
// off (PreferNoSchedule does not); Equal, Exists, key-less Exists and effect-less tolerations.
TEST_F(WorkloadControllersTest, TaintsKeepPodsThatDoNotTolerateThemOff) {
  json serving = gpu_node("serving", 4, {{"pool", "inference"}});
  serving["spec"] = {{"taints", json::array({{{"key", "dedicated"}, {"value", "inference"}, {"effect", "NoSchedule"}}})}};
  server_.put_object(serving);
  json soft = gpu_node("soft", 1, {{"pool", "inference"}});
  soft["spec"] = {{"taints", json::array({{{"key", "spot"}, {"value", "true"}, {"effect", "PreferNoSchedule"}}})}};
  server_.put_object(soft);
  json d = deployment("llm", 2, 1);
  d["spec"]["template"]["spec"]["nodeSelector"] = {{"pool", "inference"}};
  server_.put_object(d);
  int on_soft = 0, pending = 0;
  for (const json& pod : pods("llm")) {
    const std::string node = pod["spec"].value("nodeName", "");
    EXPECT_NE(node, "serving") << "a pod without tolerations was bound to the tainted node";
    if (node == "soft") ++on_soft;
    if (node.empty()) {
      ++pending;
      EXPECT_EQ(pod["status"]["conditions"][0]["message"],
                "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
                "{dedicated: inference}.");
    }
  }
  EXPECT_EQ(on_soft, 1);  // PreferNoSchedule only scores
  EXPECT_EQ(pending, 1);
  // Each toleration form lets a pod onto the tainted node; a wrong value or effect does not.
  const std::vector<std::pair<json, bool>> cases = {
      {{{"key", "dedicated"}, {"operator", "Equal"}, {"value", "inference"}, {"effect", "NoSchedule"}}, true},
      {{{"key", "dedicated"}, {"operator", "Exists"}}, true},
      {{{"operator", "Exists"}}, true},
      {{{"key", "dedicated"}, {"value", "inference"}}, true},
      {{{"key", "dedicated"}, {"value", "training"}, {"effect", "NoSchedule"}}, false},
      {{{"key", "dedicated"}, {"operator", "Exists"}, {"effect", "NoExecute"}}, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "tolerating-" + std::to_string(i);
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"nodeSelector", {{"pool", "inference"}}},
                  {"tolerations", json::array({cases[i].first})},
                  {"containers", json::array({{{"name", "c"}, {"image", "c:1"}, {"command", json::array({"/bin/false"})},
                                               {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}}};
    server_.put_object(pod);
    const std::string node = server_.get_object("v1", "pods", "default", name)["spec"].value("nodeName", "");
    EXPECT_EQ(node, cases[i].second ? "serving" : "") << cases[i].first.dump();
  }
}

TEST_F(WorkloadControllersTest, NodeAffinityAndCordonedNodes) {
  server_.put_object(gpu_node("gpu-a", 4, {{"pool", "inference"}}));
  json cordoned = gpu_node("gpu-b", 4, {{"pool", "inference"}});
  cordoned["spec"] = {{"unschedulable", true}};
  server_.put_object(cordoned);
  server_.put_object(gpu_node("gpu-c", 4, {{"pool", "training"}}));
  json d = deployment("llm", 2, 3);
  d["spec"]["template"]["spec"]["nodeSelector"] = {{"pool", "inference"}};
  server_.put_object(d);
  std::vector<json> p = pods("llm");
  ASSERT_EQ(p.size(), 2u);
  int bound = 0;
  for (const json& pod : p) {
    if (pod["spec"].value("nodeName", "") == "gpu-a") ++bound;
    if (pod["spec"].value("nodeName", "").empty()) {
      EXPECT_EQ(pod["status"]["conditions"][0]["message"],
                "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
                "affinity/selector, 1 node(s) were unschedulable or not ready.");
    }
  }
  EXPECT_EQ(bound, 1);
  // Required affinity to a host name.
  json worker = {{"apiVersion", "v1"},
                 {"kind", "Pod"},
                 {"metadata", {{"name", "worker"}, {"namespace", "default"}}},
                 {"spec",
                  {{"affinity",
                    {{"nodeAffinity",
                      {{"requiredDuringSchedulingIgnoredDuringExecution",
                        {{"nodeSelectorTerms",
                          json::array({{{"matchExpressions", json::array({{{"key", "kubernetes.io/hostname"},
                                                                            {"operator", "In"},
                                                                            {"values", json::array({"gpu-c"})}}})}}})}}}}}}},
                   {"containers",
                    json::array({{{"name", "w"}, {"image", "w"}, {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}}})}}}};
  server_.put_object(worker);
  EXPECT_EQ(server_.get_object("v1", "pods", "default", "worker")["spec"]["nodeName"], "gpu-c");
}

TEST(WorkloadControllersOffTest, WithoutControllersObjectsAreStoredAsGiven) {
  ApiServer server;
  server.put_object(deployment("chat", 3, 1));
  EXPECT_TRUE(server.list_objects("v1", "pods", "default").empty());
  auto res = server.call("GET", "/apis/apps/v1/namespaces/default/deployments/chat/scale");
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(json::parse(res.body)["spec"]["replicas"], 3);
}

}  // namespace
}  // namespace qsync::kube_test
