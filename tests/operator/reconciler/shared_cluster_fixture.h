// File: tests/operator/reconciler/shared_cluster_fixture.h
// The reconciler against the in-process Kubernetes API test server (no kubelet: tests set Pod
// phases), with the readers a shared-cluster test uses: the job "fm" in namespace default (the
// two-pool cnn job of cluster_objects.h, patched), its status, conditions and live pods, GPU
// nodes, and a clock the test moves. Used by job_shared_cluster_test.cpp and job_kueue_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "operator/api/crd_schema.h"
#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/job_reconciler.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/cluster_objects.h"

namespace qsync::reconciler {

using json = nlohmann::json;

inline const json INFERENCE_TAINT = {{"key", "dedicated"}, {"value", "inference"}, {"effect", "NoSchedule"}};

inline json gpu_node(const std::string& name, json labels, int gpus, json taints = json::array()) {
  labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB";
  json n = operator_test::ready_node(name, labels, {{"memory", "64Gi"}, {"cpu", "16"}, {"nvidia.com/gpu", std::to_string(gpus)}});
  if (!taints.empty()) n["spec"]["taints"] = taints;
  return n;
}

class SharedClusterTest : public operator_test::ApiServerTest {
 protected:
  SharedClusterTest() {
    server_.put_object(api::hybrid_training_job_crd());
    reader_ = std::make_unique<ApiClusterReader>(*client_);
    events_ = std::make_unique<kube::EventRecorder>(*client_, "qsync-operator");
    metrics_ = std::make_unique<JobMetrics>(registry_);
    ReconcilerOptions options;
    options.now_seconds = [this] { return clock_; };
    options.children.gpu_tolerations = json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
    reconciler_ = std::make_unique<JobReconciler>(*client_, *reader_, events_.get(), metrics_.get(), options);
    clock_ = std::floor(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }

  void create_job(json spec_patch, json labels = json::object()) {
    json spec = operator_test::two_pool_job_spec("cnn", "training", "inference");
    spec.merge_patch(spec_patch);
    json job = operator_test::hybrid_training_job("fm", spec);
    if (!labels.empty()) job["metadata"]["labels"] = labels;
    client_->create(hybrid_training_jobs_type(), "default", job);
  }
  void reconcile() { reconciler_->reconcile("default/fm"); }
  json job() { return server_.get_object("qsync.dev/v1alpha1", "hybridtrainingjobs", "default", "fm"); }
  api::HybridTrainingJobStatus status() { return api::hybrid_training_job_status_from_json(job()["status"]); }
  std::string condition_reason(const char* type) {
    const api::HybridTrainingJobStatus s = status();
    const api::Condition* c = api::find_condition(s.conditions, type);
    return c != nullptr ? c->reason : "<absent>";
  }
  std::vector<json> pods() {
    std::vector<json> out;
    for (const json& p : server_.list_objects("v1", "pods", "default"))
      if (!p["metadata"].contains("deletionTimestamp") && p["metadata"].value("labels", json::object()).contains("qsync.dev/job"))
        out.push_back(p);
    return out;
  }
  void patch_spec(json patch) { client_->patch_merge(hybrid_training_jobs_type(), "default", "fm", {{"spec", patch}}); }
  void set_running(const std::string& start_time = "") {
    for (json p : pods()) {
      p["status"] = {{"phase", "Running"}};
      if (!start_time.empty()) p["status"]["startTime"] = start_time;
      server_.put_object(p);
    }
  }
  static std::string env_of(const json& pod, const std::string& name) {
    for (const json& e : pod["spec"]["containers"][0]["env"])
      if (e["name"] == name) return e.value("value", "");
    return "<absent>";
  }
  static json hosts(const json& pod) {
    return pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
              ["matchExpressions"][0]["values"];
  }

  prometheus::Registry registry_;
  std::unique_ptr<ApiClusterReader> reader_;
  std::unique_ptr<kube::EventRecorder> events_;
  std::unique_ptr<JobMetrics> metrics_;
  std::unique_ptr<JobReconciler> reconciler_;
  double clock_ = 0;
};

}  // namespace qsync::reconciler
