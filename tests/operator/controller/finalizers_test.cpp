// File: tests/operator/controller/finalizers_test.cpp
// Finalizer edits report whether they changed the object; is_being_deleted reads
// metadata.deletionTimestamp.
#include "operator/controller/finalizers.h"

#include <gtest/gtest.h>

namespace qsync::controller {
namespace {

constexpr const char* kFinalizer = "qsync.io/cleanup";

TEST(Finalizers, AddIsIdempotentAndKeepsOthers) {
  json o = {{"metadata", {{"name", "a"}, {"finalizers", {"other.io/x"}}}}};
  EXPECT_FALSE(has_finalizer(o, kFinalizer));
  EXPECT_TRUE(add_finalizer(o, kFinalizer));
  EXPECT_FALSE(add_finalizer(o, kFinalizer));
  EXPECT_TRUE(has_finalizer(o, kFinalizer));
  EXPECT_EQ(o["metadata"]["finalizers"], json({"other.io/x", kFinalizer}));
}

TEST(Finalizers, AddCreatesMetadataAndList) {
  json o = json::object();
  EXPECT_TRUE(add_finalizer(o, kFinalizer));
  EXPECT_EQ(o["metadata"]["finalizers"], json({kFinalizer}));
}

TEST(Finalizers, RemoveReportsWhetherItWasThere) {
  json o = {{"metadata", {{"finalizers", {kFinalizer, "other.io/x", kFinalizer}}}}};
  EXPECT_TRUE(remove_finalizer(o, kFinalizer));
  EXPECT_EQ(o["metadata"]["finalizers"], json({"other.io/x"}));
  EXPECT_FALSE(remove_finalizer(o, kFinalizer));
  json bare = {{"metadata", json::object()}};
  EXPECT_FALSE(remove_finalizer(bare, kFinalizer));
}

TEST(Finalizers, IsBeingDeletedReadsDeletionTimestamp) {
  EXPECT_FALSE(is_being_deleted(json{{"metadata", {{"name", "a"}}}}));
  EXPECT_FALSE(is_being_deleted(json{{"metadata", {{"deletionTimestamp", nullptr}}}}));
  EXPECT_FALSE(is_being_deleted(json::object()));
  EXPECT_TRUE(is_being_deleted(json{{"metadata", {{"deletionTimestamp", "2026-11-29T20:31:50Z"}}}}));
}

}  // namespace
}  // namespace qsync::controller
