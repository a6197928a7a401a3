// File: tests/operator/kube/resource_test.cpp
// REST paths of resource types (core and named groups, namespaced and cluster-scoped, all
// namespaces, subresources), work-queue keys and percent-encoding.
#include "operator/kube/resource.h"

#include <gtest/gtest.h>

namespace qsync::kube {
namespace {

TEST(ResourceTypeTest, CoreNamespacedPaths) {
  EXPECT_EQ(pods_type().api_version(), "v1");
  EXPECT_EQ(pods_type().path("default"), "/api/v1/namespaces/default/pods");
  EXPECT_EQ(pods_type().path("default", "p1"), "/api/v1/namespaces/default/pods/p1");
  EXPECT_EQ(pods_type().path("default", "p1", "status"), "/api/v1/namespaces/default/pods/p1/status");
  EXPECT_EQ(config_maps_type().path("ns"), "/api/v1/namespaces/ns/configmaps");
  EXPECT_EQ(events_type().path("ns", "e.1"), "/api/v1/namespaces/ns/events/e.1");
}

TEST(ResourceTypeTest, EmptyNamespaceMeansAllNamespaces) {
  EXPECT_EQ(pods_type().path(""), "/api/v1/pods");
  EXPECT_EQ(services_type().path(), "/api/v1/services");
  EXPECT_EQ(leases_type().path(""), "/apis/coordination.k8s.io/v1/leases");
}

TEST(ResourceTypeTest, ClusterScopedTypesIgnoreTheNamespace) {
  EXPECT_EQ(nodes_type().path("default", "n1"), "/api/v1/nodes/n1");
  EXPECT_EQ(namespaces_type().path("x", "kube-system"), "/api/v1/namespaces/kube-system");
  EXPECT_EQ(custom_resource_definitions_type().path("default", "jobs.qsync.io"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobs.qsync.io");
  EXPECT_EQ(custom_resource_definitions_type().api_version(), "apiextensions.k8s.io/v1");
}

TEST(ResourceTypeTest, GroupPathsAndCustomResources) {
  EXPECT_EQ(leases_type().api_version(), "coordination.k8s.io/v1");
  EXPECT_EQ(deployments_type().path("serving", "chat", "scale"), "/apis/apps/v1/namespaces/serving/deployments/chat/scale");
  EXPECT_EQ(stateful_sets_type().path("serving", "db"), "/apis/apps/v1/namespaces/serving/statefulsets/db");
  EXPECT_EQ(leases_type().path("kube-system", "qsync-leader"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/qsync-leader");
  ResourceType jobs{"qsync.io", "v1alpha1", "hybridtrainingjobs", "HybridTrainingJob", true};
  EXPECT_EQ(jobs.api_version(), "qsync.io/v1alpha1");
  EXPECT_EQ(jobs.path("team-a", "j1", "status"), "/apis/qsync.io/v1alpha1/namespaces/team-a/hybridtrainingjobs/j1/status");
  EXPECT_EQ(jobs.path(""), "/apis/qsync.io/v1alpha1/hybridtrainingjobs");
  // A subresource without a name is meaningless and left out.
  EXPECT_EQ(jobs.path("team-a", "", "status"), "/apis/qsync.io/v1alpha1/namespaces/team-a/hybridtrainingjobs");
}

TEST(ResourceTypeTest, ObjectKeys) {
  EXPECT_EQ(object_key("default", "p1"), "default/p1");
  EXPECT_EQ(object_key("", "node-1"), "node-1");
  EXPECT_EQ(split_object_key("default/p1"), std::make_pair(std::string("default"), std::string("p1")));
  EXPECT_EQ(split_object_key("node-1"), std::make_pair(std::string(""), std::string("node-1")));
}

TEST(ResourceTypeTest, UrlEscapeKeepsOnlyUnreservedCharacters) {
  EXPECT_EQ(url_escape("abc-XYZ_0.9~"), "abc-XYZ_0.9~");
  EXPECT_EQ(url_escape("app=x,tier in (a,b),!gone"), "app%3Dx%2Ctier%20in%20%28a%2Cb%29%2C%21gone");
  EXPECT_EQ(url_escape("a/b?c&d#e+f%"), "a%2Fb%3Fc%26d%23e%2Bf%25");
  EXPECT_EQ(url_escape("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(url_escape(""), "");
  // Names with odd characters are escaped inside paths too.
  EXPECT_EQ(pods_type().path("default", "a b"), "/api/v1/namespaces/default/pods/a%20b");
}

}  // namespace
}  // namespace qsync::kube
