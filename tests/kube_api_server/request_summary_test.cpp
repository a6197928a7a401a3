// File: tests/kube_api_server/request_summary_test.cpp
// The test API server's cumulative request summary (GET /_test/requests?summary=1): every
// resource request counted by (verb, group, resource[/subresource]) with its failures, admin
// and discovery requests left out; and the built-in types a Helm chart installs (apps/v1
// Deployments, ServiceAccounts, rbac.authorization.k8s.io/v1 Roles, ClusterRoles and bindings).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_server.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;

// The summary row for (verb, group, resource), or null.
json row_of(const json& summary, const std::string& verb, const std::string& group, const std::string& resource) {
  for (const json& row : summary.at("requests")) {
    if (row["verb"] == verb && row["group"] == group && row["resource"] == resource) return row;
  }
  return nullptr;
}

TEST(RequestSummary, CountsEveryResourceRequestByVerbGroupAndResource) {
  ApiServer server;
  const json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "a"}}}};
  ASSERT_EQ(server.call("POST", "/api/v1/namespaces/default/configmaps", cm.dump()).status, 201);
  EXPECT_EQ(server.call("POST", "/api/v1/namespaces/default/configmaps", cm.dump()).status, 409);
  EXPECT_EQ(server.call("GET", "/api/v1/namespaces/default/configmaps/a").status, 200);
  EXPECT_EQ(server.call("GET", "/api/v1/namespaces/default/configmaps").status, 200);
  EXPECT_EQ(server.call("GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=0").status, 200);
  const json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "p"}}}, {"spec", {{"containers", json::array()}}}};
  ASSERT_EQ(server.call("POST", "/api/v1/namespaces/default/pods", pod.dump()).status, 201);
  EXPECT_EQ(server.call("PATCH", "/api/v1/namespaces/default/pods/p/status", R"({"status":{"phase":"Running"}})",
                        {{"Content-Type", "application/merge-patch+json"}})
                .status,
            200);
  EXPECT_EQ(server.call("GET", "/apis").status, 200);               // discovery: not a resource request
  EXPECT_EQ(server.call("GET", "/_test/requests").status, 200);     // admin: not counted

  const auto answer = server.call("GET", "/_test/requests?summary=1");
  ASSERT_EQ(answer.status, 200);
  const json summary = json::parse(answer.body);
  EXPECT_EQ(summary, server.request_summary());
  const json create = row_of(summary, "create", "", "configmaps");
  ASSERT_FALSE(create.is_null()) << summary.dump(2);
  EXPECT_EQ(create["count"], 2);
  EXPECT_EQ(create["failed"], 1);
  for (const char* verb : {"get", "list", "watch"}) {
    const json row = row_of(summary, verb, "", "configmaps");
    ASSERT_FALSE(row.is_null()) << verb << ": " << summary.dump(2);
    EXPECT_EQ(row["count"], 1) << verb;
    EXPECT_EQ(row["failed"], 0) << verb;
  }
  EXPECT_FALSE(row_of(summary, "patch", "", "pods/status").is_null()) << summary.dump(2);
  EXPECT_TRUE(row_of(summary, "patch", "", "pods").is_null()) << "a status patch counts as pods/status only";
  EXPECT_EQ(summary["requests"].size(), 6u) << "only resource requests are counted: " << summary.dump(2);
}

TEST(RequestSummary, ServesWhatAHelmChartInstalls) {
  ApiServer server;
  const json objects[] = {
      {{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"metadata", {{"name", "op"}}}, {"spec", {{"replicas", 1}}}},
      {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "op"}}}},
      {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "Role"}, {"metadata", {{"name", "op"}}}, {"rules", json::array()}},
      {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "RoleBinding"}, {"metadata", {{"name", "op"}}},
       {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "op"}}}},
  };
  const std::string paths[] = {"/apis/apps/v1/namespaces/default/deployments", "/api/v1/namespaces/default/serviceaccounts",
                               "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
                               "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"};
  for (size_t i = 0; i < std::size(paths); ++i) {
    EXPECT_EQ(server.call("POST", paths[i], objects[i].dump()).status, 201) << paths[i];
    EXPECT_EQ(server.call("GET", paths[i] + "/op").status, 200) << paths[i];
  }
  const json cluster_role = {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "ClusterRole"}, {"metadata", {{"name", "op"}}}};
  EXPECT_EQ(server.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", cluster_role.dump()).status, 201);
  EXPECT_EQ(server.call("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles/op").status, 404)
      << "ClusterRoles are cluster-scoped";
  EXPECT_EQ(server.get_object("rbac.authorization.k8s.io/v1", "clusterroles", "", "op")["metadata"]["name"], "op");
  const json deployment = server.get_object("apps/v1", "deployments", "default", "op");
  EXPECT_EQ(deployment["spec"]["replicas"], 1);
  const json discovery = json::parse(server.call("GET", "/apis/rbac.authorization.k8s.io/v1").body);
  EXPECT_EQ(discovery["resources"].size(), 4u) << discovery.dump(2);
}

}  // namespace
}  // namespace qsync::kube_test
