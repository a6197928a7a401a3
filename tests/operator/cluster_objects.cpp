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

json pod_group_crd() {
  const json spec_schema = {
      {"type", "object"},
      {"properties",
       {{"minMember", {{"type", "integer"}, {"format", "int32"}, {"minimum", 1}}},
        {"minResources", {{"type", "object"}, {"additionalProperties", {{"x-kubernetes-int-or-string", true}}}}},
        {"scheduleTimeoutSeconds", {{"type", "integer"}, {"format", "int32"}}}}}};
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"apiVersion", {{"type", "string"}}},
                         {"kind", {{"type", "string"}}},
                         {"metadata", {{"type", "object"}}},
                         {"spec", spec_schema},
                         {"status", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "podgroups.scheduling.x-k8s.io"}}},
          {"spec",
           {{"group", "scheduling.x-k8s.io"},
            {"scope", "Namespaced"},
            {"names", {{"plural", "podgroups"}, {"singular", "podgroup"}, {"kind", "PodGroup"}, {"listKind", "PodGroupList"},
                       {"shortNames", json::array({"pg", "pgs"})}}},
            {"versions", json::array({{{"name", "v1alpha1"},
                                       {"served", true},
                                       {"storage", true},
                                       {"subresources", {{"status", json::object()}}},
                                       {"schema", {{"openAPIV3Schema", schema}}}}})}}}};
}

}  // namespace qsync::operator_test
