// File: tests/kube_api_server/crd_schema_test.cpp
// Tests of tests/kube_api_server/crd_schema.h: reading a CRD (names, defaults, versions,
// subresources, printer columns) and its errors; the exact API-server messages for each schema
// keyword; defaults applied at the right depth; pruning of unknown fields.
#include "tests/kube_api_server/crd_schema.h"

#include <gtest/gtest.h>

namespace qsync::kube_test {
namespace {

json J(const char* text) { return json::parse(text); }

json job_crd() {
  return J(R"({
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "hybridtrainingjobs.qsync.io"},
    "spec": {"group": "qsync.io", "scope": "Namespaced",
      "names": {"kind": "HybridTrainingJob", "plural": "hybridtrainingjobs", "shortNames": ["htj"], "categories": ["all"]},
      "versions": [
        {"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
         "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}},
         "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]},
        {"name": "v1alpha0", "served": false, "storage": false}]}})");
}

std::string crd_error(const json& crd) {
  try {
    crd_info_from_json(crd);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(CrdInfo, ReadsNamesVersionsAndSubresources) {
  const CrdInfo info = crd_info_from_json(job_crd());
  EXPECT_EQ(info.name, "hybridtrainingjobs.qsync.io");
  EXPECT_EQ(info.group, "qsync.io");
  EXPECT_EQ(info.kind, "HybridTrainingJob");
  EXPECT_EQ(info.list_kind, "HybridTrainingJobList");
  EXPECT_EQ(info.plural, "hybridtrainingjobs");
  EXPECT_EQ(info.singular, "hybridtrainingjob");
  EXPECT_EQ(info.short_names, std::vector<std::string>{"htj"});
  EXPECT_EQ(info.categories, std::vector<std::string>{"all"});
  EXPECT_TRUE(info.namespaced);
  ASSERT_EQ(info.versions.size(), 2u);
  const CrdVersion* v = info.version("v1alpha1");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->served && v->storage && v->status_subresource);
  EXPECT_EQ(v->schema["properties"]["spec"]["type"], "object");
  EXPECT_EQ(v->printer_columns[0]["jsonPath"], ".status.phase");
  const CrdVersion* old = info.version("v1alpha0");
  ASSERT_NE(old, nullptr);
  EXPECT_FALSE(old->served || old->storage || old->status_subresource);
  EXPECT_TRUE(old->schema.is_null());
  EXPECT_TRUE(old->printer_columns.empty());
  EXPECT_EQ(info.version("v2"), nullptr);
  json cluster = job_crd();
  cluster["spec"]["scope"] = "Cluster";
  cluster["spec"]["names"]["listKind"] = "JobItems";
  cluster["spec"]["names"]["singular"] = "job";
  const CrdInfo c = crd_info_from_json(cluster);
  EXPECT_FALSE(c.namespaced);
  EXPECT_EQ(c.list_kind, "JobItems");
  EXPECT_EQ(c.singular, "job");
}

TEST(CrdInfo, ErrorsNameTheBadField) {
  json crd = job_crd();
  crd["metadata"]["name"] = "jobs.qsync.io";
  EXPECT_EQ(crd_error(crd),
            "metadata.name: Invalid value: \"jobs.qsync.io\": must be spec.names.plural+\".\"+spec.group: \"hybridtrainingjobs.qsync.io\"");
  crd = job_crd();
  crd["spec"]["versions"][1]["storage"] = true;
  EXPECT_EQ(crd_error(crd), "spec.versions: Invalid value: 2 storage versions: must have exactly one version marked as storage version");
  crd["spec"]["versions"][0]["storage"] = false;
  crd["spec"]["versions"][1]["storage"] = false;
  EXPECT_EQ(crd_error(crd), "spec.versions: Invalid value: 0 storage versions: must have exactly one version marked as storage version");
  crd = job_crd();
  crd["spec"]["scope"] = "Global";
  EXPECT_EQ(crd_error(crd), "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\"");
  crd = job_crd();
  crd["spec"].erase("group");
  EXPECT_EQ(crd_error(crd), "spec.group: Required value");
  crd = job_crd();
  crd["spec"]["names"].erase("kind");
  EXPECT_EQ(crd_error(crd), "spec.names.kind: Required value");
  crd = job_crd();
  crd["spec"]["versions"][1]["name"] = "v1alpha1";
  EXPECT_EQ(crd_error(crd), "spec.versions[1].name: Duplicate value: \"v1alpha1\"");
  crd = job_crd();
  crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = "color";
  EXPECT_EQ(crd_error(crd), "spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: \"color\": supported values: "
                                     "\"boolean\", \"date\", \"integer\", \"number\", \"string\"");
  crd = job_crd();
  crd["spec"]["versions"] = json::array();
  EXPECT_EQ(crd_error(crd), "spec.versions: Required value: list at least one version");
  crd = job_crd();
  crd["apiVersion"] = "apiextensions.k8s.io/v1beta1";
  EXPECT_EQ(crd_error(crd), "apiVersion: Unsupported value: \"apiextensions.k8s.io/v1beta1\": supported values: \"apiextensions.k8s.io/v1\"");
  crd = job_crd();
  crd["spec"]["names"]["plural"] = "Jobs";
  EXPECT_NE(crd_error(crd).find("spec.names.plural: Invalid value: \"Jobs\": must be a lower-case DNS label"), std::string::npos);
  EXPECT_EQ(crd_error(J("[]")), "<root>: Invalid value: \"array\": a CustomResourceDefinition must be an object");
}

const json kSchema = J(R"({"type": "object", "required": ["spec"], "properties": {
  "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
  "spec": {"type": "object", "required": ["model"], "properties": {
    "model": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z0-9-]+$"},
    "replicas": {"type": "integer", "minimum": 0, "maximum": 64},
    "lr": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1, "exclusiveMaximum": true},
    "mode": {"type": "string", "enum": ["a", "b"]},
    "port": {"x-kubernetes-int-or-string": true},
    "deadline": {"type": "string", "format": "date-time"},
    "note": {"type": "string", "nullable": true},
    "suspend": {"type": "boolean"},
    "pool": {"type": "object", "properties": {"training": {"type": "array", "minItems": 1, "maxItems": 2,
      "items": {"type": "object", "required": ["count"], "properties": {"count": {"type": "integer", "minimum": 1}}}}}},
    "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
    "closed": {"type": "object", "additionalProperties": false, "properties": {"x": {"type": "string"}}},
    "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}},
  "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})");

json object_with_spec(const char* spec) {
  return {{"apiVersion", "qsync.io/v1alpha1"}, {"kind", "HybridTrainingJob"}, {"metadata", {{"name", "j"}}}, {"spec", J(spec)}};
}

std::vector<std::string> errors_for(const char* spec) { return schema_validate(kSchema, object_with_spec(spec)); }

using Errors = std::vector<std::string>;

TEST(SchemaValidate, ValidObjectHasNoErrors) {
  EXPECT_EQ(errors_for(R"({"model": "gpt2", "replicas": 0, "lr": 0.5, "mode": "a", "port": "http", "deadline": "2024-05-01T12:00:00Z",
      "note": null, "suspend": false, "pool": {"training": [{"count": 2}]}, "limits": {"gpu": 1},
      "closed": {"x": "y"}, "template": {"apiVersion": "v1", "kind": "Pod", "spec": {}}})"), Errors{});
  EXPECT_EQ(errors_for(R"({"model": "m", "port": 8080, "lr": 1e-3, "deadline": "2024-05-01T12:00:00.25+02:00"})"), Errors{});
}

TEST(SchemaValidate, ApiServerMessagesForEachKeyword) {
  EXPECT_EQ(errors_for(R"({"model": "m", "replicas": -1})"),
            Errors{"spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"});
  EXPECT_EQ(errors_for(R"({"model": "m", "replicas": 65})"),
            Errors{"spec.replicas: Invalid value: 65: spec.replicas in body should be less than or equal to 64"});
  EXPECT_EQ(errors_for(R"({"model": "m", "lr": 0, "mode": "x"})"),
            (Errors{"spec.lr: Invalid value: 0: spec.lr in body should be greater than 0",
                    "spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""}));
  EXPECT_EQ(errors_for(R"({"model": "m", "lr": 1})"), Errors{"spec.lr: Invalid value: 1: spec.lr in body should be less than 1"});
  EXPECT_EQ(errors_for(R"({"replicas": 1})"), Errors{"spec.model: Required value"});
  EXPECT_EQ(errors_for(R"({"model": ""})"), (Errors{"spec.model: Invalid value: \"\": spec.model in body should be at least 1 chars long",
                                                    "spec.model: Invalid value: \"\": spec.model in body should match '^[a-z0-9-]+$'"}));
  EXPECT_EQ(errors_for(R"({"model": "abcdefghi"})"),
            Errors{"spec.model: Invalid value: \"abcdefghi\": spec.model in body should be at most 8 chars long"});
  EXPECT_EQ(errors_for(R"({"model": "GPT"})"), Errors{"spec.model: Invalid value: \"GPT\": spec.model in body should match '^[a-z0-9-]+$'"});
  EXPECT_EQ(errors_for(R"({"model": "m", "deadline": "tomorrow"})"),
            Errors{"spec.deadline: Invalid value: \"tomorrow\": spec.deadline in body must be of type date-time: \"tomorrow\""});
}

TEST(SchemaValidate, TypesIntegersAndNulls) {
  EXPECT_EQ(errors_for(R"({"model": "m", "replicas": "two"})"),
            Errors{"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "replicas": 1.5})"),
            Errors{"spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "suspend": "yes"})"),
            Errors{"spec.suspend: Invalid value: \"string\": spec.suspend in body must be of type boolean: \"string\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "replicas": null})"),
            Errors{"spec.replicas: Invalid value: \"null\": spec.replicas in body must be of type integer: \"null\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "port": true})"),
            Errors{"spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "lr": "0.1"})"),
            Errors{"spec.lr: Invalid value: \"string\": spec.lr in body must be of type number: \"string\""});
  EXPECT_EQ(schema_validate(kSchema, J(R"({"metadata": {}, "spec": []})")),
            Errors{"spec: Invalid value: \"array\": spec in body must be of type object: \"array\""});
}

TEST(SchemaValidate, NestedArraysMapsAndEmbeddedResources) {
  EXPECT_EQ(errors_for(R"({"model": "m", "pool": {"training": [{"count": 1}, {"count": 0}, {}]}})"),
            (Errors{"spec.pool.training: Invalid value: 3: spec.pool.training in body should have at most 2 items",
                    "spec.pool.training[1].count: Invalid value: 0: spec.pool.training[1].count in body should be greater than or equal to 1",
                    "spec.pool.training[2].count: Required value"}));
  EXPECT_EQ(errors_for(R"({"model": "m", "pool": {"training": []}})"),
            Errors{"spec.pool.training: Invalid value: 0: spec.pool.training in body should have at least 1 items"});
  EXPECT_EQ(errors_for(R"({"model": "m", "limits": {"gpu": "one"}})"),
            Errors{"spec.limits.gpu: Invalid value: \"string\": spec.limits.gpu in body must be of type integer: \"string\""});
  EXPECT_EQ(errors_for(R"({"model": "m", "closed": {"y": 1}})"),
            Errors{"spec.closed.y: Invalid value: 1: spec.closed.y in body is a forbidden property"});
  EXPECT_EQ(errors_for(R"({"model": "m", "template": {"kind": ""}})"),
            (Errors{"spec.template.apiVersion: Required value: must not be empty", "spec.template.kind: Required value: must not be empty"}));
}

TEST(SchemaValidate, RootMetadataIsCheckedForTypeOnly) {
  // metadata's content and the root's required apiVersion/kind are the server's business.
  const json schema = J(R"({"type": "object", "required": ["apiVersion", "kind", "metadata"], "properties": {
      "metadata": {"type": "object", "required": ["labels"], "properties": {"name": {"type": "string", "maxLength": 1}}}}})");
  EXPECT_EQ(schema_validate(schema, J(R"({"metadata": {"name": "long-name"}})")), Errors{});
  EXPECT_EQ(schema_validate(schema, J(R"({"metadata": "x"})")),
            Errors{"metadata: Invalid value: \"string\": metadata in body must be of type object: \"string\""});
  EXPECT_EQ(schema_validate(kSchema, J(R"({"apiVersion": "v1", "kind": "X", "metadata": {}})")), Errors{"spec: Required value"});
}

TEST(SchemaDefaults, AppliedAtTheRightDepth) {
  const json schema = J(R"({"type": "object", "properties": {"spec": {"type": "object", "properties": {
      "replicas": {"type": "integer", "default": 1},
      "mode": {"type": "string", "default": "sync"},
      "note": {"type": "string", "nullable": true, "default": "n"},
      "pool": {"type": "object", "properties": {"count": {"type": "integer", "default": 4}}},
      "policy": {"type": "object", "default": {}, "properties": {"backoff": {"type": "integer", "default": 3}}},
      "workers": {"type": "array", "items": {"type": "object", "properties": {"gpus": {"type": "integer", "default": 1}}}},
      "classes": {"type": "object", "additionalProperties": {"type": "object", "properties": {"bits": {"type": "integer", "default": 16}}}}}}}})");
  json object = J(R"({"apiVersion": "v", "kind": "K", "spec": {"mode": null, "note": null, "workers": [{}, {"gpus": 8}],
                      "classes": {"h200": {}, "cpu": {"bits": 8}}}})");
  schema_apply_defaults(schema, object);
  EXPECT_EQ(object["spec"], J(R"({"replicas": 1, "mode": "sync", "note": null, "policy": {"backoff": 3},
      "workers": [{"gpus": 1}, {"gpus": 8}], "classes": {"h200": {"bits": 16}, "cpu": {"bits": 8}}})"));
  // The absent pool (no default of its own) is not created for its child's default; a present one is filled.
  json with_pool = J(R"({"spec": {"pool": {}, "replicas": 5}})");
  schema_apply_defaults(schema, with_pool);
  EXPECT_EQ(with_pool["spec"]["pool"], J(R"({"count": 4})"));
  EXPECT_EQ(with_pool["spec"]["replicas"], 5);
  // No spec at all: nothing is created.
  json bare = J(R"({"apiVersion": "v"})");
  schema_apply_defaults(schema, bare);
  EXPECT_EQ(bare, J(R"({"apiVersion": "v"})"));
}

TEST(SchemaPrune, DropsUndeclaredFieldsOnly) {
  json object = object_with_spec(R"({"model": "m", "unknown": 1, "pool": {"training": [{"count": 1, "extra": true}], "x": 0},
      "limits": {"gpu": 1, "cpu": 2}, "closed": {"x": "k", "y": 1},
      "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"anything": [1]}}})");
  object["status"] = J(R"({"phase": "Running", "free": {"form": 1}})");
  object["extraTop"] = 1;
  object["metadata"]["labels"] = {{"a", "b"}};
  schema_prune_unknown(kSchema, object);
  EXPECT_EQ(object, J(R"({"apiVersion": "qsync.io/v1alpha1", "kind": "HybridTrainingJob", "metadata": {"name": "j", "labels": {"a": "b"}},
      "spec": {"model": "m", "pool": {"training": [{"count": 1}]}, "limits": {"gpu": 1, "cpu": 2}, "closed": {"x": "k"},
               "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"anything": [1]}}},
      "status": {"phase": "Running", "free": {"form": 1}}})"));
  // An embedded resource keeps apiVersion/kind/metadata even without preserve-unknown-fields.
  const json embedded = J(R"({"type": "object", "properties": {"t": {"type": "object", "x-kubernetes-embedded-resource": true,
      "properties": {"spec": {"type": "object"}}}}})");
  json t = J(R"({"t": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"a": 1}, "other": 2}})");
  schema_prune_unknown(embedded, t);
  EXPECT_EQ(t, J(R"({"t": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}})"));
  // No schema: nothing is pruned.
  json kept = J(R"({"a": {"b": 1}})");
  schema_prune_unknown(nullptr, kept);
  EXPECT_EQ(kept, J(R"({"a": {"b": 1}})"));
}

}  // namespace
}  // namespace qsync::kube_test
