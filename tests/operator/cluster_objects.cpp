// File: tests/operator/cluster_objects.cpp
// The Nodes and HybridTrainingJobs the operator's tests put into the API test server
// (cluster_objects.h).
#include "tests/operator/cluster_objects.h"

namespace qsync::operator_test {

using json = nlohmann::json;

json ready_node(const std::string& name, const json& labels, const json& allocatable) {
  json status = {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  if (!allocatable.empty()) status["allocatable"] = allocatable;
  return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}, {"labels", labels}}}, {"status", status}};
}

json two_pool_job_spec(const std::string& zoo, const std::string& training_pool, const std::string& inference_pool) {
  auto group = [](const char* name, const std::string& pool) {
    return json::array({{{"name", name}, {"nodeSelector", {{"qsync.dev/pool", pool}}}, {"count", 1}}});
  };
  return {{"model", {{"zoo", zoo}}},
          {"steps", 20},
          {"globalBatch", 64},
          {"planning", {{"allocator", "greedy"}}},
          {"pool", {{"training", group("train", training_pool)}, {"inference", group("infer", inference_pool)}}}};
}

json hybrid_training_job(const std::string& name, const json& spec) {
  return {{"apiVersion", "qsync.dev/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

}  // namespace qsync::operator_test
