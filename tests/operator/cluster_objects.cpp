// File: tests/operator/cluster_objects.cpp
// The Nodes and HybridTrainingJobs the operator's tests put into the API test server
// (cluster_objects.h).
#include "tests/operator/cluster_objects.h"

#include <cctype>

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

namespace {

json kueue_crd(const std::string& plural, const std::string& kind, bool namespaced) {
  const json kept = {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"apiVersion", {{"type", "string"}}},
                         {"kind", {{"type", "string"}}},
                         {"metadata", {{"type", "object"}}},
                         {"spec", kept},
                         {"status", kept}}}};
  json version = {{"name", "v1beta2"}, {"served", true}, {"storage", true}, {"schema", {{"openAPIV3Schema", schema}}}};
  if (namespaced) version["subresources"] = {{"status", json::object()}};
  std::string singular = kind;
  for (char& c : singular) c = char(std::tolower(static_cast<unsigned char>(c)));
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + ".kueue.x-k8s.io"}}},
          {"spec",
           {{"group", "kueue.x-k8s.io"},
            {"scope", namespaced ? "Namespaced" : "Cluster"},
            {"names", {{"plural", plural}, {"singular", singular}, {"kind", kind}, {"listKind", kind + "List"}}},
            {"versions", json::array({version})}}}};
}

}  // namespace

json kueue_workload_crd() { return kueue_crd("workloads", "Workload", true); }
json kueue_resource_flavor_crd() { return kueue_crd("resourceflavors", "ResourceFlavor", false); }

json resource_flavor(const std::string& name, const json& node_labels, const json& tolerations) {
  json spec = {{"nodeLabels", node_labels}};
  if (!tolerations.empty()) spec["tolerations"] = tolerations;
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"}, {"kind", "ResourceFlavor"}, {"metadata", {{"name", name}}}, {"spec", spec}};
}

}  // namespace qsync::operator_test
