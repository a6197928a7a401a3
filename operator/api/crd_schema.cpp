// File: operator/api/crd_schema.cpp
// Field table -> openAPIV3Schema, and the CRD around it. Keys come out sorted (nlohmann::json
// objects are ordered maps), which is also the order controller-gen writes.
#include "operator/api/crd_schema.h"

#include <stdexcept>

#include "operator/api/group_version.h"
#include "operator/api/json_to_yaml.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;

json field_schema(const Field& f) {
  json s = json::object();
  switch (f.type) {
    case FieldType::STRING: s["type"] = "string"; break;
    case FieldType::DATE_TIME: s["type"] = "string"; s["format"] = "date-time"; break;
    case FieldType::INTEGER: s["type"] = "integer"; s["format"] = "int64"; break;
    case FieldType::NUMBER: s["type"] = "number"; break;
    case FieldType::BOOLEAN: s["type"] = "boolean"; break;
    case FieldType::OBJECT: s["type"] = "object"; break;
    case FieldType::ARRAY: s["type"] = "array"; s["items"] = {{"type", "object"}}; break;
    case FieldType::STRING_MAP:
      s["type"] = "object";
      s["additionalProperties"] = {{"type", "string"}};
      break;
    case FieldType::QUANTITY_MAP:
      s["type"] = "object";
      s["additionalProperties"] = {{"x-kubernetes-int-or-string", true}, {"pattern", QUANTITY_PATTERN}};
      break;
  }
  s["description"] = f.format_hint.empty() ? f.description : f.description + " Format: " + f.format_hint + ".";
  if (!f.default_value.is_null()) s["default"] = f.default_value;
  if (!f.allowed.empty()) s["enum"] = f.allowed;
  if (f.minimum) {
    // Whole-number bounds print as integers (minimum: 1, not 1.0).
    if (*f.minimum == static_cast<double>(static_cast<int64_t>(*f.minimum))) s["minimum"] = static_cast<int64_t>(*f.minimum);
    else s["minimum"] = *f.minimum;
    if (f.exclusive_minimum) s["exclusiveMinimum"] = true;
  }
  if (f.min_length) s["minLength"] = *f.min_length;
  if (!f.pattern.empty()) s["pattern"] = f.pattern;
  if (!f.rules.empty()) {
    json rules = json::array();
    for (const auto& [rule, message] : f.rules) rules.push_back({{"rule", rule}, {"message", message}});
    s["x-kubernetes-validations"] = rules;
  }
  if (f.open_object) {
    if (f.type == FieldType::ARRAY) s["items"]["x-kubernetes-preserve-unknown-fields"] = true;
    else s["x-kubernetes-preserve-unknown-fields"] = true;
  }
  if (!f.list_map_keys.empty()) {
    s["x-kubernetes-list-type"] = "map";
    s["x-kubernetes-list-map-keys"] = f.list_map_keys;
  }
  return s;
}

// The object schema that holds the properties of the children of `path` ("spec.pool",
// "spec.pool.training[]").
json& properties_holder(json& root_schema, const std::string& root, const std::string& path) {
  if (path == root) return root_schema;
  if (path.rfind(root + ".", 0) != 0) throw std::logic_error("field path '" + path + "' is not under '" + root + "'");
  json* node = &root_schema;
  size_t start = root.size() + 1;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    std::string name = path.substr(start, dot - start);
    const bool items = name.size() > 2 && name.compare(name.size() - 2, 2, "[]") == 0;
    if (items) name.resize(name.size() - 2);
    if (!node->contains("properties") || !(*node)["properties"].contains(name))
      throw std::logic_error("field table: '" + path + "' comes before its parent '" + name + "' is declared");
    node = &(*node)["properties"][name];
    if (items) node = &(*node)["items"];
    start = dot + 1;
  }
  return *node;
}

}  // namespace

json schema_from_fields(const std::vector<Field>& fields, const std::string& root, const std::string& description) {
  json schema = {{"type", "object"}, {"description", description}};
  for (const Field& f : fields) {
    const size_t dot = f.path.rfind('.');
    if (dot == std::string::npos) throw std::logic_error("field path '" + f.path + "' has no parent");
    json& holder = properties_holder(schema, root, f.path.substr(0, dot));
    const std::string name = f.path.substr(dot + 1);
    holder["properties"][name] = field_schema(f);
    if (f.required) holder["required"].push_back(name);
  }
  return schema;
}

json hybrid_training_job_schema() {
  json schema = {
      {"type", "object"},
      {"description",
       "HybridTrainingJob trains one model data-parallel over a mixed pool of training and inference "
       "devices, with per-rank precisions and batches chosen by the QSync planner."},
      {"required", json::array({"spec"})},
  };
  schema["properties"]["apiVersion"] = {{"type", "string"}, {"description", "The API version: qsync.dev/v1alpha1."}};
  schema["properties"]["kind"] = {{"type", "string"}, {"description", "HybridTrainingJob."}};
  schema["properties"]["metadata"] = {{"type", "object"}};
  schema["properties"]["spec"] = schema_from_fields(job_spec_fields(), "spec",
                                                    "What to train, on what data, for how long, on which devices.");
  schema["properties"]["spec"]["x-kubernetes-validations"] = json::array(
      {{{"rule", "has(self.steps) != has(self.epochs)"}, {"message", "set exactly one of steps or epochs"}}});
  schema["properties"]["status"] =
      schema_from_fields(hybrid_training_job_status_fields(), "status", "The job's observed state, written by the operator.");
  return schema;
}

json hybrid_training_job_printer_columns() {
  return json::array({
      {{"name", "Phase"}, {"type", "string"}, {"jsonPath", ".status.phase"}, {"description", "The job's phase."}},
      {{"name", "Ranks"}, {"type", "integer"}, {"jsonPath", ".status.replicas.total"}, {"description", "Worker pods."}},
      {{"name", "Predicted Step"},
       {"type", "number"},
       {"jsonPath", ".status.plan.predictedStepSeconds"},
       {"description", "The plan's predicted step time in seconds."}},
      {{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}},
  });
}

json hybrid_training_job_crd() {
  json version = {
      {"name", VERSION},
      {"served", true},
      {"storage", true},
      {"schema", {{"openAPIV3Schema", hybrid_training_job_schema()}}},
      {"subresources", {{"status", json::object()}}},
      {"additionalPrinterColumns", hybrid_training_job_printer_columns()},
  };
  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", CRD_NAME}, {"labels", {{"app.kubernetes.io/part-of", "qsync"}}}}},
      {"spec",
       {{"group", GROUP},
        {"names",
         {{"kind", KIND},
          {"listKind", LIST_KIND},
          {"plural", PLURAL},
          {"singular", SINGULAR},
          {"shortNames", json::array({SHORT_NAME})},
          {"categories", json::array({CATEGORY})}}},
        {"scope", "Namespaced"},
        {"versions", json::array({version})}}},
  };
}

std::string hybrid_training_job_crd_yaml() {
  return "# Generated by qsync-crd-gen from planner/job_fields.cpp and operator/api/status_fields.cpp; do not edit.\n"
         "# Regenerate: build/bin/qsync-crd-gen > crds/qsync.dev_hybridtrainingjobs.yaml\n"
         "---\n" +
         json_to_yaml(hybrid_training_job_crd());
}

}  // namespace qsync::api
