// File: tests/kube_api_server/api_server_test.cpp
// Semantics of the Kubernetes API test server through its in-process call() (the same routing
// as HTTP): discovery, create/get/update with resourceVersions and generation, Status errors,
// CRD registration with schema validation, defaulting and pruning, status subresource
// isolation, the patch types, server-side apply, list selectors and paging, Tables, OpenAPI v3.
// Watch, deletion, faults and the local kubelet are in api_server_watch_test.cpp.
#include "tests/kube_api_server/api_server.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace qsync::kube_test {
namespace {

using nlohmann::json;

struct Answer {
  int status;
  json body;
};

Answer call(ApiServer& s, const std::string& method, const std::string& target, const json& body = nullptr,
            const std::string& content_type = "application/json", const std::string& accept = "") {
  std::map<std::string, std::string> headers;
  if (!body.is_null()) headers["Content-Type"] = content_type;
  if (!accept.empty()) headers["Accept"] = accept;
  auto res = s.call(method, target, body.is_null() ? "" : (body.is_string() ? body.get<std::string>() : body.dump()), headers);
  json parsed = json::parse(res.body, nullptr, false);
  return {res.status, parsed.is_discarded() ? json(res.body) : parsed};
}

json widget_crd() {
  json schema = {{"type", "object"},
                 {"properties",
                  {{"spec",
                    {{"type", "object"},
                     {"required", {"size"}},
                     {"properties",
                      {{"size", {{"type", "string"}, {"enum", {"small", "large"}}}},
                       {"replicas", {{"type", "integer"}, {"minimum", 0}, {"maximum", 10}, {"default", 1}}}}}}},
                   {"status", {{"type", "object"}, {"properties", {{"phase", {{"type", "string"}}}}}}}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "widgets.test.qsync.io"}}},
          {"spec",
           {{"group", "test.qsync.io"},
            {"scope", "Namespaced"},
            {"names", {{"plural", "widgets"}, {"singular", "widget"}, {"kind", "Widget"}, {"shortNames", {"wdg"}}}},
            {"versions",
             {{{"name", "v1"},
               {"served", true},
               {"storage", true},
               {"subresources", {{"status", json::object()}}},
               {"additionalPrinterColumns", {{{"name", "Size"}, {"type", "string"}, {"jsonPath", ".spec.size"}}}},
               {"schema", {{"openAPIV3Schema", schema}}}}}}}}};
}

const std::string kWidgets = "/apis/test.qsync.io/v1/namespaces/default/widgets";

json widget(const std::string& name, const std::string& size) {
  return {{"apiVersion", "test.qsync.io/v1"}, {"kind", "Widget"}, {"metadata", {{"name", name}}}, {"spec", {{"size", size}}}};
}

class ApiServerTest : public ::testing::Test {
 protected:
  void install_crd() { ASSERT_EQ(call(server, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widget_crd()).status, 201); }
  ApiServer server;
};

TEST_F(ApiServerTest, DiscoveryListsBuiltinGroupsAndResources) {
  auto api = call(server, "GET", "/api");
  EXPECT_EQ(api.body["versions"], json({"v1"}));
  auto groups = call(server, "GET", "/apis").body.dump();
  EXPECT_NE(groups.find("coordination.k8s.io"), std::string::npos);
  EXPECT_NE(groups.find("apiextensions.k8s.io"), std::string::npos);
  auto core = call(server, "GET", "/api/v1").body;
  bool pods = false, node_scope = true;
  for (const auto& r : core["resources"]) {
    if (r["name"] == "pods") pods = r["shortNames"] == json({"po"}) && r["namespaced"] == true;
    if (r["name"] == "nodes") node_scope = r["namespaced"];
  }
  EXPECT_TRUE(pods);
  EXPECT_FALSE(node_scope);
  EXPECT_EQ(call(server, "GET", "/version").body["major"], "1");
  EXPECT_EQ(call(server, "GET", "/apis/nothing.example/v1").status, 404);
}

TEST_F(ApiServerTest, CreateGetAndStatusErrors) {
  json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "cfg"}}}, {"data", {{"a", "1"}}}};
  auto created = call(server, "POST", "/api/v1/namespaces/default/configmaps", cm);
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_FALSE(created.body["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(created.body["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_FALSE(created.body["metadata"]["creationTimestamp"].get<std::string>().empty());
  EXPECT_EQ(created.body["metadata"]["namespace"], "default");

  auto again = call(server, "POST", "/api/v1/namespaces/default/configmaps", cm);
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.body["kind"], "Status");
  EXPECT_EQ(again.body["reason"], "AlreadyExists");

  auto missing = call(server, "GET", "/api/v1/namespaces/default/configmaps/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body["reason"], "NotFound");
  EXPECT_EQ(missing.body["message"], "configmaps \"nope\" not found");

  auto no_ns = call(server, "POST", "/api/v1/namespaces/ghost/configmaps", cm);
  EXPECT_EQ(no_ns.status, 404);
  EXPECT_EQ(no_ns.body["message"], "namespaces \"ghost\" not found");

  json generated = {{"metadata", {{"generateName", "cfg-"}}}};
  auto g = call(server, "POST", "/api/v1/namespaces/default/configmaps", generated);
  ASSERT_EQ(g.status, 201);
  EXPECT_EQ(g.body["metadata"]["name"].get<std::string>().rfind("cfg-", 0), 0u);
}

TEST_F(ApiServerTest, UpdateChecksResourceVersionAndGenerationMovesOnSpecOnly) {
  json lease = {{"metadata", {{"name", "leader"}}}, {"spec", {{"holderIdentity", "a"}}}};
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
  auto created = call(server, "POST", leases, lease).body;
  EXPECT_EQ(created["metadata"]["generation"], 1);

  json stale = created;
  stale["spec"]["holderIdentity"] = "b";
  auto updated = call(server, "PUT", leases + "/leader", stale);
  ASSERT_EQ(updated.status, 200) << updated.body;
  EXPECT_EQ(updated.body["metadata"]["generation"], 2);
  EXPECT_NE(updated.body["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);

  auto conflict = call(server, "PUT", leases + "/leader", stale);  // carries the old resourceVersion
  EXPECT_EQ(conflict.status, 409);
  EXPECT_EQ(conflict.body["reason"], "Conflict");

  json labelled = updated.body;
  labelled["metadata"]["labels"] = {{"k", "v"}};
  auto relabelled = call(server, "PUT", leases + "/leader", labelled).body;
  EXPECT_EQ(relabelled["metadata"]["generation"], 2);  // metadata only
  auto noop = call(server, "PUT", leases + "/leader", relabelled).body;
  EXPECT_EQ(noop["metadata"]["resourceVersion"], relabelled["metadata"]["resourceVersion"]);
}

TEST_F(ApiServerTest, CrdRegistersTypeAndValidatesDefaultsAndPrunes) {
  install_crd();
  auto crd = call(server, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.qsync.io").body;
  std::string conditions = crd["status"]["conditions"].dump();
  EXPECT_NE(conditions.find("Established"), std::string::npos);
  EXPECT_NE(conditions.find("NamesAccepted"), std::string::npos);
  auto resources = call(server, "GET", "/apis/test.qsync.io/v1").body;
  EXPECT_NE(resources.dump().find("\"widgets/status\""), std::string::npos);
  EXPECT_NE(resources.dump().find("\"wdg\""), std::string::npos);

  json w = widget("w1", "small");
  w["spec"]["unknownField"] = 7;
  w["status"] = {{"phase", "Hacked"}};
  auto created = call(server, "POST", kWidgets, w);
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.body["spec"]["replicas"], 1);                 // defaulted
  EXPECT_FALSE(created.body["spec"].contains("unknownField"));    // pruned
  EXPECT_FALSE(created.body.contains("status"));                  // status subresource: ignored on create

  json typo = widget("w3", "small");
  typo["spec"]["colour"] = "red";
  auto strict = call(server, "POST", kWidgets + "?fieldValidation=Strict", typo);
  EXPECT_EQ(strict.status, 400);
  EXPECT_NE(strict.body["message"].get<std::string>().find("unknown field \"spec.colour\""), std::string::npos) << strict.body;

  json bad = widget("w2", "huge");
  bad["spec"]["replicas"] = -1;
  auto invalid = call(server, "POST", kWidgets, bad);
  EXPECT_EQ(invalid.status, 422);
  EXPECT_EQ(invalid.body["reason"], "Invalid");
  EXPECT_EQ(invalid.body["details"]["causes"].size(), 2u) << invalid.body;
  EXPECT_NE(invalid.body["message"].get<std::string>().find("spec.replicas"), std::string::npos);

  ASSERT_EQ(call(server, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.qsync.io").status, 200);
  EXPECT_EQ(call(server, "GET", kWidgets + "/w1").status, 404);
  EXPECT_EQ(call(server, "GET", "/apis/test.qsync.io/v1").status, 404);
}

TEST_F(ApiServerTest, StatusSubresourceIsIsolated) {
  install_crd();
  auto created = call(server, "POST", kWidgets, widget("w", "small")).body;
  json with_status = created;
  with_status["status"] = {{"phase", "Ready"}};
  with_status["spec"]["size"] = "large";
  auto status_put = call(server, "PUT", kWidgets + "/w/status", with_status);
  ASSERT_EQ(status_put.status, 200) << status_put.body;
  EXPECT_EQ(status_put.body["status"]["phase"], "Ready");
  EXPECT_EQ(status_put.body["spec"]["size"], "small");  // spec ignored on /status
  EXPECT_EQ(status_put.body["metadata"]["generation"], 1);

  json main_put = status_put.body;
  main_put["status"] = {{"phase", "Overwritten"}};
  main_put["spec"]["size"] = "large";
  auto updated = call(server, "PUT", kWidgets + "/w", main_put).body;
  EXPECT_EQ(updated["status"]["phase"], "Ready");  // status ignored on the main resource
  EXPECT_EQ(updated["spec"]["size"], "large");
  EXPECT_EQ(updated["metadata"]["generation"], 2);
}

TEST_F(ApiServerTest, PatchTypes) {
  install_crd();
  call(server, "POST", kWidgets, widget("w", "small"));
  auto merged = call(server, "PATCH", kWidgets + "/w", json{{"spec", {{"replicas", 4}}}}, "application/merge-patch+json");
  ASSERT_EQ(merged.status, 200) << merged.body;
  EXPECT_EQ(merged.body["spec"]["replicas"], 4);
  auto patched = call(server, "PATCH", kWidgets + "/w", json::array({{{"op", "replace"}, {"path", "/spec/size"}, {"value", "large"}}}),
                      "application/json-patch+json");
  EXPECT_EQ(patched.body["spec"]["size"], "large");
  auto strategic = call(server, "PATCH", kWidgets + "/w", json{{"spec", {{"replicas", 2}}}}, "application/strategic-merge-patch+json");
  EXPECT_EQ(strategic.status, 415);
  auto invalid = call(server, "PATCH", kWidgets + "/w", json{{"spec", {{"replicas", 99}}}}, "application/merge-patch+json");
  EXPECT_EQ(invalid.status, 422);
  auto status_patch = call(server, "PATCH", kWidgets + "/w/status", json{{"status", {{"phase", "Done"}}}, {"spec", {{"replicas", 7}}}},
                           "application/merge-patch+json").body;
  EXPECT_EQ(status_patch["status"]["phase"], "Done");
  EXPECT_EQ(status_patch["spec"]["replicas"], 4);

  json cm = {{"metadata", {{"name", "cfg"}}}, {"data", {{"a", "1"}}}};
  call(server, "POST", "/api/v1/namespaces/default/configmaps", cm);
  auto cm_patch = call(server, "PATCH", "/api/v1/namespaces/default/configmaps/cfg", json{{"data", {{"b", "2"}}}},
                       "application/strategic-merge-patch+json");
  ASSERT_EQ(cm_patch.status, 200);
  EXPECT_EQ(cm_patch.body["data"], json({{"a", "1"}, {"b", "2"}}));
}

TEST_F(ApiServerTest, ServerSideApplyCreatesUpdatesAndReportsConflicts) {
  install_crd();
  std::string yaml = "apiVersion: test.qsync.io/v1\nkind: Widget\nmetadata:\n  name: ssa\nspec:\n  size: small\n  replicas: 2\n";
  auto created = call(server, "PATCH", kWidgets + "/ssa?fieldManager=alice", json(yaml), "application/apply-patch+yaml");
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.body["spec"]["replicas"], 2);
  EXPECT_EQ(created.body["metadata"]["managedFields"][0]["manager"], "alice");

  std::string bob = "apiVersion: test.qsync.io/v1\nkind: Widget\nmetadata:\n  name: ssa\nspec:\n  size: small\n  replicas: 5\n";
  auto conflict = call(server, "PATCH", kWidgets + "/ssa?fieldManager=bob", json(bob), "application/apply-patch+yaml");
  EXPECT_EQ(conflict.status, 409) << conflict.body;
  auto forced = call(server, "PATCH", kWidgets + "/ssa?fieldManager=bob&force=true", json(bob), "application/apply-patch+yaml");
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.body["spec"]["replicas"], 5);
  EXPECT_EQ(call(server, "PATCH", kWidgets + "/ssa", json(bob), "application/apply-patch+yaml").status, 400);  // no fieldManager
}

TEST_F(ApiServerTest, ListSelectorsPagingAndResourceVersion) {
  for (int i = 0; i < 5; ++i) {
    std::string name = "p";
    name += std::to_string(i);
    json pod = {{"metadata", {{"name", name}, {"labels", {{"app", i % 2 ? "odd" : "even"}}}}},
                {"spec", {{"containers", {{{"name", "c"}, {"image", "x"}}}}}}};
    ASSERT_EQ(call(server, "POST", "/api/v1/namespaces/default/pods", pod).status, 201);
  }
  auto all = call(server, "GET", "/api/v1/pods").body;
  EXPECT_EQ(all["kind"], "PodList");
  EXPECT_EQ(all["items"].size(), 5u);
  EXPECT_EQ(all["metadata"]["resourceVersion"], server.current_resource_version());
  EXPECT_EQ(call(server, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dodd").body["items"].size(), 2u);
  EXPECT_EQ(call(server, "GET", "/api/v1/namespaces/default/pods?labelSelector=app+in+(odd,even),app!=odd").body["items"].size(), 3u);
  EXPECT_EQ(call(server, "GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dp3").body["items"].size(), 1u);
  EXPECT_EQ(call(server, "GET", "/api/v1/namespaces/default/pods?labelSelector=app+in+(").status, 400);

  std::vector<std::string> names;
  std::string token;
  int pages = 0;
  do {
    std::string target = "/api/v1/namespaces/default/pods?limit=2";
    if (!token.empty()) target += "&continue=" + token;
    auto page = call(server, "GET", target).body;
    for (const auto& item : page["items"]) names.push_back(item["metadata"]["name"]);
    token = page["metadata"].value("continue", "");
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4"}));
}

TEST_F(ApiServerTest, TableUsesPrinterColumns) {
  install_crd();
  call(server, "POST", kWidgets, widget("w", "large"));
  auto table = call(server, "GET", kWidgets, nullptr, "", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
  ASSERT_EQ(table.status, 200);
  EXPECT_EQ(table.body["kind"], "Table");
  std::string columns = table.body["columnDefinitions"].dump();
  EXPECT_NE(columns.find("Size"), std::string::npos) << columns;
  EXPECT_NE(table.body["rows"].dump().find("large"), std::string::npos);
  EXPECT_FALSE(table.body["metadata"]["resourceVersion"].get<std::string>().empty());
}

TEST_F(ApiServerTest, OpenApiV3ListsEveryGroupVersionWithFieldValidation) {
  install_crd();
  auto root = call(server, "GET", "/openapi/v3").body;
  ASSERT_TRUE(root["paths"].contains("apis/test.qsync.io/v1")) << root;
  std::string url = root["paths"]["apis/test.qsync.io/v1"]["serverRelativeURL"];
  auto doc = call(server, "GET", url).body.dump();
  EXPECT_NE(doc.find("fieldValidation"), std::string::npos);
  EXPECT_NE(doc.find("\"kind\":\"Widget\""), std::string::npos);
}

TEST_F(ApiServerTest, DirectAccessorsAndRequestLog) {
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "direct"}, {"namespace", "default"}}},
              {"spec", {{"containers", json::array()}}}, {"status", {{"phase", "Running"}}}};
  json stored = server.put_object(pod);
  EXPECT_EQ(stored["status"]["phase"], "Running");
  EXPECT_EQ(server.get_object("v1", "pods", "default", "direct")["status"]["phase"], "Running");
  EXPECT_EQ(server.list_objects("v1", "pods").size(), 1u);
  EXPECT_TRUE(server.get_object("v1", "pods", "default", "none").is_null());
  call(server, "GET", "/api/v1/namespaces/default/pods/none");
  std::string log = server.recent_requests_text();
  EXPECT_NE(log.find("GET /api/v1/namespaces/default/pods/none -> 404"), std::string::npos) << log;
}

}  // namespace
}  // namespace qsync::kube_test
