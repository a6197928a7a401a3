// File: tests/operator/api/crd_schema_test.cpp
// The generated CRD's structure: names, scope, one served storage version with the status
// subresource and the printer columns, and a structural schema carrying the table's defaults,
// enums, bounds and patterns.
#include "operator/api/crd_schema.h"

#include <gtest/gtest.h>

#include <functional>

#include "operator/api/group_version.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;

const json& spec_schema() {
  static const json s = hybrid_training_job_schema()["properties"]["spec"];
  return s;
}

TEST(CrdSchema, NamesScopeAndVersion) {
  const json crd = hybrid_training_job_crd();
  EXPECT_EQ(crd["apiVersion"], "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["kind"], "CustomResourceDefinition");
  EXPECT_EQ(crd["metadata"]["name"], "hybridtrainingjobs.qsync.dev");
  EXPECT_EQ(crd["spec"]["group"], "qsync.dev");
  EXPECT_EQ(crd["spec"]["scope"], "Namespaced");
  const json& names = crd["spec"]["names"];
  EXPECT_EQ(names["kind"], "HybridTrainingJob");
  EXPECT_EQ(names["listKind"], "HybridTrainingJobList");
  EXPECT_EQ(names["plural"], "hybridtrainingjobs");
  EXPECT_EQ(names["singular"], "hybridtrainingjob");
  EXPECT_EQ(names["shortNames"], json::array({"htj"}));
  EXPECT_EQ(names["categories"], json::array({"qsync"}));
  ASSERT_EQ(crd["spec"]["versions"].size(), 1u);
  const json& v = crd["spec"]["versions"][0];
  EXPECT_EQ(v["name"], "v1alpha1");
  EXPECT_EQ(v["served"], true);
  EXPECT_EQ(v["storage"], true);
  EXPECT_EQ(v["subresources"], json({{"status", json::object()}}));
}

TEST(CrdSchema, PrinterColumns) {
  const json columns = hybrid_training_job_crd()["spec"]["versions"][0]["additionalPrinterColumns"];
  ASSERT_EQ(columns.size(), 4u);
  const std::vector<std::array<const char*, 3>> expected = {
      {"Phase", "string", ".status.phase"},
      {"Ranks", "integer", ".status.replicas.total"},
      {"Predicted Step", "number", ".status.plan.predictedStepSeconds"},
      {"Age", "date", ".metadata.creationTimestamp"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(columns[i]["name"], expected[i][0]);
    EXPECT_EQ(columns[i]["type"], expected[i][1]);
    EXPECT_EQ(columns[i]["jsonPath"], expected[i][2]);
  }
}

TEST(CrdSchema, DefaultsEnumsAndBounds) {
  const json& p = spec_schema()["properties"];
  EXPECT_EQ(spec_schema()["required"], json::array({"model"}));
  EXPECT_EQ(p["globalBatch"]["type"], "integer");
  EXPECT_EQ(p["globalBatch"]["default"], 128);
  EXPECT_EQ(p["globalBatch"]["minimum"], 1);
  EXPECT_EQ(p["steps"]["minimum"], 1);
  EXPECT_FALSE(p["steps"].contains("default"));
  EXPECT_EQ(p["epochs"]["minimum"], 0);
  EXPECT_EQ(p["epochs"]["exclusiveMinimum"], true);
  EXPECT_EQ(p["optimizer"]["default"], json::object());  // so its children's defaults apply
  EXPECT_EQ(p["optimizer"]["properties"]["lr"]["default"], 0.001);
  EXPECT_EQ(p["optimizer"]["properties"]["lr"]["exclusiveMinimum"], true);
  EXPECT_EQ(p["optimizer"]["properties"]["name"]["enum"], json::array({"adamw", "sgd"}));
  EXPECT_EQ(p["optimizer"]["properties"]["schedule"]["default"], "cosine");
  EXPECT_EQ(p["planning"]["properties"]["allocator"]["enum"],
            json::array({"exact", "greedy", "uniform", "uniform-low-weak", "dynamic-batching"}));
  EXPECT_EQ(p["planning"]["properties"]["allocator"]["default"], "exact");
  EXPECT_EQ(p["planning"]["properties"]["precision"]["enum"], json::array({"fp32", "tf32", "bf16", "fp16", "int8", "int8-all", "fp8"}));
  EXPECT_TRUE(p["planning"]["properties"]["stepTimeTarget"].contains("pattern"));
  EXPECT_EQ(p["checkpoint"]["properties"]["intervalSteps"]["default"], 100);
  EXPECT_EQ(p["image"]["default"], "ghcr.io/qsync/qsync-worker:0.1.0");
  const json& run = p["runPolicy"]["properties"];
  EXPECT_EQ(run["backoffLimit"]["default"], 3);
  EXPECT_EQ(run["backoffLimit"]["minimum"], 0);
  EXPECT_EQ(run["activeDeadlineSeconds"]["minimum"], 1);
  EXPECT_EQ(run["cleanPodPolicy"]["enum"], json::array({"None", "Running", "All"}));
  EXPECT_EQ(run["cleanPodPolicy"]["default"], "Running");
  EXPECT_EQ(run["suspend"]["default"], false);
  EXPECT_EQ(run["managedBy"]["default"], "qsync.dev/operator");
  // Fixed values (Kubeflow's), immutable once set (a CEL transition rule: real API servers).
  EXPECT_EQ(run["managedBy"]["enum"], json::array({"qsync.dev/operator", "kueue.x-k8s.io/multikueue"}));
  EXPECT_EQ(run["managedBy"]["x-kubernetes-validations"][0]["rule"], "self == oldSelf");
}

TEST(CrdSchema, PodTemplateKeepsKubernetesTypesWhole) {
  const json& t = spec_schema()["properties"]["podTemplate"]["properties"];
  EXPECT_EQ(t["affinity"]["x-kubernetes-preserve-unknown-fields"], true);
  EXPECT_EQ(t["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"], true);
  EXPECT_EQ(t["volumes"]["items"]["required"], json::array({"name"}));
  EXPECT_EQ(t["tolerations"]["items"]["properties"]["effect"]["enum"],
            json::array({"NoSchedule", "PreferNoSchedule", "NoExecute"}));
  EXPECT_FALSE(t.contains("hostNetwork"));  // only the listed settings
  // Every pool entry takes one too.
  const json& entry = spec_schema()["properties"]["pool"]["properties"]["inference"]["items"]["properties"];
  EXPECT_EQ(entry["podTemplate"]["properties"]["tolerations"]["type"], "array");
}

TEST(CrdSchema, PoolEntriesAndMaps) {
  const json& pool = spec_schema()["properties"]["pool"]["properties"];
  const json& training = pool["training"];
  EXPECT_EQ(training["type"], "array");
  EXPECT_EQ(training["items"]["type"], "object");
  EXPECT_EQ(training["items"]["required"], json::array({"name"}));
  EXPECT_EQ(training["items"]["properties"]["count"]["default"], 1);
  EXPECT_EQ(training["items"]["properties"]["nodeSelector"]["additionalProperties"], json({{"type", "string"}}));
  EXPECT_FALSE(training["items"]["properties"].contains("offPeakOnly"));
  EXPECT_EQ(pool["inference"]["items"]["properties"]["offPeakOnly"]["default"], false);
  EXPECT_EQ(pool["local"]["items"]["required"], json::array({"deviceClass"}));
  const json quantities = spec_schema()["properties"]["resources"]["properties"]["limits"]["additionalProperties"];
  EXPECT_EQ(quantities["x-kubernetes-int-or-string"], true);
  EXPECT_FALSE(quantities.contains("type"));  // structural: int-or-string has no type
}

TEST(CrdSchema, CrossFieldRulesAreCelValidations) {
  EXPECT_EQ(spec_schema()["x-kubernetes-validations"][0]["rule"], "has(self.steps) != has(self.epochs)");
  EXPECT_TRUE(spec_schema()["properties"]["model"].contains("x-kubernetes-validations"));
}

TEST(CrdSchema, StatusSchema) {
  const json status = hybrid_training_job_schema()["properties"]["status"];
  EXPECT_EQ(status["properties"]["phase"]["enum"],
            json::array({"Pending", "Planning", "Running", "Restarting", "Resizing", "Waiting", "Suspended", "Succeeded", "Failed"}));
  const json& conditions = status["properties"]["conditions"];
  EXPECT_EQ(conditions["x-kubernetes-list-type"], "map");
  EXPECT_EQ(conditions["x-kubernetes-list-map-keys"], json::array({"type"}));
  EXPECT_EQ(conditions["items"]["required"], json::array({"type", "status", "reason", "message", "lastTransitionTime"}));
  EXPECT_EQ(conditions["items"]["properties"]["lastTransitionTime"]["format"], "date-time");
  EXPECT_EQ(status["properties"]["plan"]["properties"]["ranks"]["items"]["properties"]["precisionMix"]["type"], "string");
  EXPECT_EQ(status["properties"]["replicas"]["properties"]["total"]["type"], "integer");
}

// Structural schema rules (apiextensions' structural.go): every node has a type (or is
// int-or-string), and every object node says what its fields are.
TEST(CrdSchema, EverySchemaNodeIsStructural) {
  std::function<void(const json&, const std::string&)> walk = [&](const json& s, const std::string& at) {
    if (s.value("x-kubernetes-int-or-string", false)) {
      EXPECT_FALSE(s.contains("type")) << at;
      return;
    }
    ASSERT_TRUE(s.contains("type")) << at << " has no type";
    if (s["type"] == "object" && at != "metadata") {
      EXPECT_TRUE(s.contains("properties") || s.contains("additionalProperties") ||
                  s.value("x-kubernetes-preserve-unknown-fields", false))  // kept whole (podTemplate.affinity)
          << at << " would be pruned to {}";
    }
    if (s.contains("properties"))
      for (const auto& [name, child] : s["properties"].items()) walk(child, at.empty() ? name : at + "." + name);
    if (s.contains("additionalProperties")) walk(s["additionalProperties"], at + ".*");
    if (s.contains("items")) walk(s["items"], at + "[]");
  };
  walk(hybrid_training_job_schema(), "");
}

TEST(CrdSchema, TableMistakesAreCaught) {
  const std::vector<Field> orphan = {Field::string("spec.missing.child", "no parent")};
  EXPECT_THROW(schema_from_fields(orphan, "spec", ""), std::logic_error);
}

}  // namespace
}  // namespace qsync::api
