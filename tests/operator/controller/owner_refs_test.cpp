// File: tests/operator/controller/owner_refs_test.cpp
// set_controller_reference, controller_reference_of and owner_key_of.
#include "operator/controller/owner_refs.h"

#include <gtest/gtest.h>

namespace qsync::controller {
namespace {

json owner_named(const std::string& name, const std::string& uid, const std::string& ns = "ns") {
  return {{"apiVersion", "qsync.io/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}}}};
}

json pod_named(const std::string& name, const std::string& ns = "ns") {
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}, {"namespace", ns}}}};
}

TEST(OwnerRefs, SetControllerReferenceAddsAControllingReference) {
  json pod = pod_named("w0");
  set_controller_reference(pod, owner_named("job", "u1"));
  ASSERT_EQ(pod["metadata"]["ownerReferences"].size(), 1u);
  const json& ref = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(ref["apiVersion"], "qsync.io/v1alpha1");
  EXPECT_EQ(ref["kind"], "HybridTrainingJob");
  EXPECT_EQ(ref["name"], "job");
  EXPECT_EQ(ref["uid"], "u1");
  EXPECT_EQ(ref["controller"], true);
  EXPECT_EQ(ref["blockOwnerDeletion"], true);
  EXPECT_EQ(controller_reference_of(pod)->at("name"), "job");
}

TEST(OwnerRefs, SettingTheSameOwnerAgainRefreshesInPlace) {
  json pod = pod_named("w0");
  set_controller_reference(pod, owner_named("job", "u1"));
  set_controller_reference(pod, owner_named("job", "u2"));
  ASSERT_EQ(pod["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "u2");
}

TEST(OwnerRefs, KeepsOtherNonControllingReferences) {
  json pod = pod_named("w0");
  pod["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "cm"}, {"uid", "c"}}});
  set_controller_reference(pod, owner_named("job", "u1"));
  EXPECT_EQ(pod["metadata"]["ownerReferences"].size(), 2u);
}

TEST(OwnerRefs, RefusesASecondController) {
  json pod = pod_named("w0");
  set_controller_reference(pod, owner_named("job", "u1"));
  try {
    set_controller_reference(pod, owner_named("other-job", "u2"));
    FAIL() << "a second controller was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("already controlled by HybridTrainingJob job"), std::string::npos) << e.what();
  }
}

TEST(OwnerRefs, RefusesIncompleteOwnersAndCrossNamespaceOwnership) {
  json pod = pod_named("w0");
  json no_uid = owner_named("job", "");
  EXPECT_THROW(set_controller_reference(pod, no_uid), std::invalid_argument);
  EXPECT_THROW(set_controller_reference(pod, owner_named("job", "u1", "elsewhere")), std::invalid_argument);
  json cluster_owner = owner_named("node-owner", "u9", "");
  cluster_owner["metadata"].erase("namespace");
  EXPECT_NO_THROW(set_controller_reference(pod, cluster_owner)) << "a cluster-scoped owner may own namespaced objects";
}

TEST(OwnerRefs, OwnerKeyOfMatchesGroupAndKind) {
  json pod = pod_named("w0");
  set_controller_reference(pod, owner_named("job", "u1"));
  EXPECT_EQ(owner_key_of(pod, "qsync.io/v1alpha1", "HybridTrainingJob"), "ns/job");
  EXPECT_EQ(owner_key_of(pod, "qsync.io/v1", "HybridTrainingJob"), "ns/job") << "versions of one group match";
  EXPECT_EQ(owner_key_of(pod, "other.io/v1alpha1", "HybridTrainingJob"), std::nullopt);
  EXPECT_EQ(owner_key_of(pod, "qsync.io/v1alpha1", "Job"), std::nullopt);
  EXPECT_EQ(owner_key_of(pod, "qsync.io/v1alpha1", "HybridTrainingJob", false), "job");
  EXPECT_EQ(owner_key_of(pod_named("lonely"), "qsync.io/v1alpha1", "HybridTrainingJob"), std::nullopt);
}

TEST(OwnerRefs, OwnerKeyOfIgnoresNonControllingReferences) {
  json pod = pod_named("w0");
  pod["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "qsync.io/v1alpha1"}, {"kind", "HybridTrainingJob"}, {"name", "job"}, {"uid", "u"}}});
  EXPECT_EQ(owner_key_of(pod, "qsync.io/v1alpha1", "HybridTrainingJob"), std::nullopt);
}

TEST(OwnerRefs, GroupOfApiVersion) {
  EXPECT_EQ(group_of_api_version("apps/v1"), "apps");
  EXPECT_EQ(group_of_api_version("v1"), "");
}

}  // namespace
}  // namespace qsync::controller
