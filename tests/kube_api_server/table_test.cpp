// File: tests/kube_api_server/table_test.cpp
// Tests of tests/kube_api_server/table.h: kubectl's age rendering at each of its boundaries,
// the JSONPath subset, and Tables with the default Name/Age columns and with CRD printer
// columns of every type, under each includeObject.
#include "tests/kube_api_server/table.h"

#include <ctime>

#include <gtest/gtest.h>

namespace qsync::kube_test {
namespace {

json J(const char* text) { return json::parse(text); }

// An RFC 3339 timestamp `seconds_ago` before now.
std::string timestamp_ago(long seconds_ago) {
  const std::time_t t = std::time(nullptr) - seconds_ago;
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

TEST(KubeAge, MatchesKubectlHumanDuration) {
  const std::pair<double, const char*> cases[] = {
      {-5, "<invalid>"}, {-1, "0s"}, {0, "0s"}, {5.9, "5s"}, {119, "119s"}, {120, "2m"}, {200, "3m20s"}, {180, "3m"},
      {599, "9m59s"}, {600, "10m"}, {10799, "179m"}, {10800, "3h"}, {7500, "125m"}, {11100, "3h5m"}, {28799, "7h59m"}, {28800, "8h"},
      {47 * 3600, "47h"}, {48 * 3600, "2d"}, {4 * 86400 + 6 * 3600, "4d6h"}, {4 * 86400, "4d"}, {8 * 86400, "8d"},
      {400 * 86400, "400d"}, {730 * 86400, "2y"}, {760 * 86400, "2y30d"}, {9 * 365 * 86400, "9y"}};
  for (const auto& [seconds, age] : cases) EXPECT_EQ(kube_age(seconds), age) << seconds;
}

TEST(JsonPathGet, SimplePaths) {
  const json object = J(R"({"metadata": {"name": "j", "annotations": {"qsync.io/pool": "a"}},
      "spec": {"pool": {"training": [{"count": 2}, {"count": 3}]}}, "status": {"phase": "Running"}})");
  EXPECT_EQ(json_path_get(object, ".status.phase"), "Running");
  EXPECT_EQ(json_path_get(object, ".spec.pool.training[0].count"), 2);
  EXPECT_EQ(json_path_get(object, ".spec.pool.training[-1].count"), 3);
  EXPECT_EQ(json_path_get(object, "{.spec.pool.training[1].count}"), 3);
  EXPECT_EQ(json_path_get(object, "$.metadata.name"), "j");
  EXPECT_EQ(json_path_get(object, ".metadata.annotations['qsync.io/pool']"), "a");
  EXPECT_EQ(json_path_get(object, ".metadata.annotations.qsync\\.io/pool"), "a");
  EXPECT_EQ(json_path_get(object, ".spec.pool"), object["spec"]["pool"]);
  EXPECT_EQ(json_path_get(object, "."), object);
  EXPECT_TRUE(json_path_get(object, ".status.missing").is_null());
  EXPECT_TRUE(json_path_get(object, ".spec.pool.training[5].count").is_null());
  EXPECT_TRUE(json_path_get(object, ".status.phase.deeper").is_null());
  EXPECT_TRUE(json_path_get(object, ".status[0]").is_null());
  EXPECT_THROW(json_path_get(object, "status.phase"), std::invalid_argument);
  EXPECT_THROW(json_path_get(object, ".spec..pool"), std::invalid_argument);
  EXPECT_THROW(json_path_get(object, ".spec.pool.training[x]"), std::invalid_argument);
  EXPECT_THROW(json_path_get(object, ".spec.pool.training[0"), std::invalid_argument);
}

TEST(Table, DefaultColumnsAreNameAndAge) {
  const json pod = {{"kind", "Pod"}, {"metadata", {{"name", "w0"}, {"creationTimestamp", timestamp_ago(3 * 3600)}, {"uid", "u"}}}};
  const json no_time = {{"metadata", {{"name", "w1"}}}};
  const json bad_time = {{"metadata", {{"name", "w2"}, {"creationTimestamp", "yesterday"}}}};
  const json table = table_for({pod, no_time, bad_time}, json::array(), "");
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  EXPECT_EQ(table["metadata"], json::object());
  ASSERT_EQ(table["columnDefinitions"].size(), 2u);
  EXPECT_EQ(table["columnDefinitions"][0]["name"], "Name");
  EXPECT_EQ(table["columnDefinitions"][0]["type"], "string");
  EXPECT_EQ(table["columnDefinitions"][0]["format"], "name");
  EXPECT_EQ(table["columnDefinitions"][0]["priority"], 0);
  EXPECT_EQ(table["columnDefinitions"][1]["name"], "Age");
  EXPECT_EQ(table["columnDefinitions"][1]["type"], "date");
  ASSERT_EQ(table["rows"].size(), 3u);
  EXPECT_EQ(table["rows"][0]["cells"], J(R"(["w0", "3h"])"));
  EXPECT_EQ(table["rows"][1]["cells"], J(R"(["w1", null])"));
  EXPECT_EQ(table["rows"][2]["cells"], J(R"(["w2", "<invalid>"])"));
  // includeObject defaults to Metadata.
  EXPECT_EQ(table["rows"][0]["object"], (json{{"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", pod["metadata"]}}));
  EXPECT_EQ(table_for({}, nullptr, "None")["rows"], json::array());
}

TEST(Table, PrinterColumnsOfEveryType) {
  const json columns = J(R"([
      {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "The job's phase"},
      {"name": "Training", "type": "integer", "jsonPath": ".spec.pool.training[0].count", "priority": 1},
      {"name": "Ratio", "type": "number", "jsonPath": ".status.ratio", "format": "float"},
      {"name": "Suspended", "type": "boolean", "jsonPath": ".spec.suspend"},
      {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
      {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])");
  json job = J(R"({"apiVersion": "qsync.io/v1alpha1", "kind": "HybridTrainingJob", "metadata": {"name": "j"},
      "spec": {"pool": {"training": [{"count": 2.0}]}, "suspend": true}, "status": {"phase": "Running", "ratio": 3}})");
  job["metadata"]["creationTimestamp"] = timestamp_ago(4 * 86400 + 60);
  const json bare = J(R"({"metadata": {"name": "k"}, "spec": {"suspend": "no"}})");
  const json table = table_for({job, bare}, columns, "Object");
  ASSERT_EQ(table["columnDefinitions"].size(), 7u);
  EXPECT_EQ(table["columnDefinitions"][1],
            J(R"({"name": "Phase", "type": "string", "format": "", "description": "The job's phase", "priority": 0})"));
  EXPECT_EQ(table["columnDefinitions"][2],
            J(R"({"name": "Training", "type": "integer", "format": "", "priority": 1,
                  "description": "Custom resource definition column (in JSONPath format): .spec.pool.training[0].count"})"));
  EXPECT_EQ(table["columnDefinitions"][3]["format"], "float");
  const json& cells = table["rows"][0]["cells"];
  EXPECT_EQ(cells, (json{"j", "Running", 2, 3.0, true, R"({"training":[{"count":2.0}]})", "4d"}));
  EXPECT_TRUE(cells[2].is_number_integer());  // 2.0 becomes an integer cell
  EXPECT_TRUE(cells[3].is_number_float());
  // Absent paths and values of the wrong type are empty cells.
  EXPECT_EQ(table["rows"][1]["cells"], (json{"k", nullptr, nullptr, nullptr, nullptr, nullptr, nullptr}));
  EXPECT_EQ(table["rows"][0]["object"], job);
}

TEST(Table, IncludeObjectNoneOmitsObjectsAndUnknownValuesThrow) {
  const json table = table_for({J(R"({"metadata": {"name": "a"}})")}, json::array(), "None");
  EXPECT_FALSE(table["rows"][0].contains("object"));
  EXPECT_EQ(table_for({J(R"({"metadata": {"name": "a"}})")}, json::array(), "Metadata")["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_THROW(table_for({}, json::array(), "Everything"), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::kube_test
