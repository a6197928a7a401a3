// File: tests/operator/api/crd_server_schema_test.cpp
// The generated CRD as the Kubernetes API test server sees it (tests/kube_api_server): the
// committed YAML reads back into the same JSON, registers as a CRD, its schema accepts the
// example manifests and refuses the invalid specs; the server's defaulting and the C++ types'
// defaulting agree; and the local runner's job parser accepts the cluster example too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/api/status_fields.h"
#include "operator/api/crd_schema.h"
#include "planner/job_field_validation.h"
#include "operator/api/hybrid_training_job.h"
#include "operator/api/json_to_yaml.h"
#include "planner/job_spec.h"
#include "tests/kube_api_server/crd_schema.h"
#include "tests/kube_api_server/yaml_json.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;
const std::filesystem::path SOURCE_DIR = QSYNC_SOURCE_DIR;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json example(const char* relative) { return kube_test::yaml_to_json(read_file(SOURCE_DIR / relative)); }

// The object as the API server stores it: pruned, defaulted, validated.
std::vector<std::string> server_admit(json& object) {
  const json schema = hybrid_training_job_schema();
  kube_test::schema_prune_unknown(schema, object);
  kube_test::schema_apply_defaults(schema, object);
  return kube_test::schema_validate(schema, object);
}

std::string joined(const std::vector<std::string>& messages) {
  std::string all;
  for (const std::string& m : messages) all += m + "\n";
  return all;
}

TEST(CrdServerSchema, YamlReadsBackAsTheGeneratedJson) {
  EXPECT_EQ(kube_test::yaml_to_json(hybrid_training_job_crd_yaml()), hybrid_training_job_crd());
  const json tricky = {{"a", "true"}, {"b", "1"}, {"c", ""}, {"d", "x: y"}, {"e", "no"}, {"f", " lead"}, {"g", "#x"},
                       {"h", json::array({"1.5", 1.5, nullptr, "null", json::object(), json::array()})},
                       {"i", json::array({json::array({1, 2}), {{"k", "v"}, {"l", json::array({"m"})}}})},
                       {"j", "line\nbreak \"quoted\" \\ tab\t"}, {"nvidia.com/gpu", 1}, {"k", "v1alpha1"}};
  EXPECT_EQ(kube_test::yaml_to_json(json_to_yaml(tricky)), tricky) << json_to_yaml(tricky);
}

TEST(CrdServerSchema, TheTestServerAcceptsTheCrd) {
  const kube_test::CrdInfo info = kube_test::crd_info_from_json(kube_test::yaml_to_json(read_file(SOURCE_DIR / "crds/qsync.dev_hybridtrainingjobs.yaml")));
  EXPECT_EQ(info.name, "hybridtrainingjobs.qsync.dev");
  EXPECT_EQ(info.kind, "HybridTrainingJob");
  EXPECT_EQ(info.short_names, std::vector<std::string>{"htj"});
  ASSERT_NE(info.version("v1alpha1"), nullptr);
  EXPECT_TRUE(info.version("v1alpha1")->status_subresource);
  EXPECT_EQ(info.version("v1alpha1")->printer_columns.size(), 4u);
}

TEST(CrdServerSchema, ExamplesAreAccepted) {
  for (const char* file : {"examples/k8s/fmnist-hybrid.yaml", "examples/jobs/fmnist-hybrid.yaml"}) {
    json object = example(file);
    EXPECT_EQ(joined(server_admit(object)), "") << file;
  }
}

TEST(CrdServerSchema, ServerAndTypesDefaultAlike) {
  for (const char* file : {"examples/k8s/fmnist-hybrid.yaml", "examples/jobs/fmnist-hybrid.yaml"}) {
    json by_server = example(file);
    ASSERT_EQ(joined(server_admit(by_server)), "") << file;
    json by_table = example(file)["spec"];
    apply_field_defaults(job_spec_fields(), "spec", by_table);
    EXPECT_EQ(by_server["spec"], by_table) << file << "\nserver: " << by_server["spec"].dump(2) << "\ntable: " << by_table.dump(2);
  }
  // The operator's example through the typed structs: what the reconciler reads is what the
  // server stored.
  json stored = example("examples/k8s/fmnist-hybrid.yaml");
  server_admit(stored);
  const HybridTrainingJob job = hybrid_training_job_from_json(stored);
  EXPECT_EQ(to_json(job.spec), stored["spec"]);
  EXPECT_EQ(job.spec.steps, 300);
  EXPECT_EQ(job.spec.pool.training.size(), 1u);
  EXPECT_EQ(job.spec.pool.inference[0].node_selector.at("qsync.dev/pool"), "inference");
  EXPECT_EQ(job.spec.run_policy.backoff_limit, 2);
  EXPECT_EQ(job.spec.checkpoint.interval_steps, 100);
}

TEST(CrdServerSchema, TheLocalRunnerAcceptsTheClusterExample) {
  const std::string path = (SOURCE_DIR / "examples/k8s/fmnist-hybrid.yaml").string();
  const JobFile job = job_file_load(path);
  EXPECT_EQ(job.model_reference(), "cnn");
  EXPECT_EQ(job.spec.steps, 300);
  EXPECT_EQ(job.spec.global_batch, 128);
  EXPECT_EQ(job.spec.checkpoint.interval_steps, 100);
  EXPECT_EQ(job.spec.data.path, "/usr/share/datasets/fashion-mnist");
}

struct SchemaCase {
  const char* what;
  const char* patch;     // JSON merge patch on the example's spec
  const char* expected;  // a substring of the server's message
};

class InvalidForTheServer : public testing::TestWithParam<SchemaCase> {};

TEST_P(InvalidForTheServer, IsRefusedBySchemaAndTypes) {
  json object = example("examples/k8s/fmnist-hybrid.yaml");
  object["spec"].merge_patch(json::parse(GetParam().patch));
  json for_types = object;
  const std::string server = joined(server_admit(object));
  EXPECT_NE(server.find(GetParam().expected), std::string::npos) << GetParam().what << ": " << server;
  // The typed parser refuses the same object.
  EXPECT_THROW((void)hybrid_training_job_from_json(for_types), std::invalid_argument) << GetParam().what;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidForTheServer,
    testing::Values(
        SchemaCase{"negative globalBatch", R"({"globalBatch": -5})",
                   "spec.globalBatch: Invalid value: -5: spec.globalBatch in body should be greater than or equal to 1"},
        SchemaCase{"unknown allocator", R"({"planning": {"allocator": "fastest"}})",
                   "spec.planning.allocator: Unsupported value: \"fastest\""},
        SchemaCase{"bad duration", R"({"planning": {"stepTimeTarget": "2 hours"}})", "spec.planning.stepTimeTarget: Invalid value"},
        SchemaCase{"zero epochs", R"({"steps": null, "epochs": 0})", "spec.epochs in body should be greater than 0"},
        SchemaCase{"bad cleanPodPolicy", R"({"runPolicy": {"cleanPodPolicy": "Some"}})",
                   "spec.runPolicy.cleanPodPolicy: Unsupported value"},
        SchemaCase{"count zero", R"({"pool": {"training": [{"name": "t", "count": 0}]}})", "spec.pool.training[0].count"},
        SchemaCase{"pool entry without a name", R"({"pool": {"training": [{"count": 1}]}})",
                   "spec.pool.training[0].name: Required value"},
        SchemaCase{"no model", R"({"model": null})", "spec.model: Required value"},
        SchemaCase{"bad memory quantity", R"({"pool": {"inference": [{"name": "i", "memoryBudget": "lots"}]}})",
                   "spec.pool.inference[0].memoryBudget: Invalid value"},
        SchemaCase{"string steps", R"({"steps": "300"})", "spec.steps: Invalid value"},
        SchemaCase{"unknown gang scheduler", R"({"runPolicy": {"schedulingPolicy": {"gang": "yunikorn"}}})",
                   "spec.runPolicy.schedulingPolicy.gang: Unsupported value: \"yunikorn\""}),
    [](const testing::TestParamInfo<SchemaCase>& info) {
      std::string name;
      for (const char* c = info.param.what; *c; ++c) name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
      return name;
    });

}  // namespace
}  // namespace qsync::api
