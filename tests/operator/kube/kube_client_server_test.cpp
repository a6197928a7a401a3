// File: tests/operator/kube/kube_client_server_test.cpp
// The client against the Kubernetes API test server (tests/kube_api_server) in-process:
// create/get/list (selectors, paging)/update with a stale resourceVersion/merge patch/status
// subresource/delete, watch (events in order, stop, 410 after history is compacted), Event
// aggregation and Lease create/update, with injected faults. A failure prints the server's
// recent exchanges.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "operator/kube/events.h"
#include "operator/kube/kube_client.h"
#include "tests/operator/api_server_fixture.h"

namespace qsync::kube {
namespace {

using Clock = std::chrono::steady_clock;

// Unlimited rate (the tests pace themselves) and a 10 s request timeout.
ClientOptions test_client_options() {
  ClientOptions options;
  options.qps = 0;
  options.request_timeout_seconds = 10;
  return options;
}

class KubeClientServerTest : public operator_test::ApiServerTest {
 protected:
  KubeClientServerTest() : ApiServerTest({}, test_client_options()) {}
  void TearDown() override {
    if (HasFailure()) std::cerr << "recent exchanges:\n" << server_.recent_requests_text() << "\n";
    client_.reset();
    server_.stop();
  }
  static json config_map(const std::string& name, const std::string& app) {
    return {{"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", app}}}}},
            {"data", {{"k", "v"}}}};
  }
};

TEST_F(KubeClientServerTest, CreateGetUpdateConflictPatchDelete) {
  json created = client_->create(config_maps_type(), "default", config_map("c1", "x"));
  std::string uid = created["metadata"]["uid"];
  std::string version = created["metadata"]["resourceVersion"];
  EXPECT_FALSE(uid.empty());
  EXPECT_FALSE(version.empty());
  try {
    client_->create(config_maps_type(), "default", config_map("c1", "x"));
    FAIL() << "expected AlreadyExists";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_already_exists(e)) << e.what();
  }

  json fetched = client_->get(config_maps_type(), "default", "c1");
  EXPECT_EQ(fetched["metadata"]["uid"], uid);
  fetched["data"]["k"] = "v2";
  json updated = client_->update(config_maps_type(), fetched);
  EXPECT_NE(updated["metadata"]["resourceVersion"], version);
  // The same stale object again: a Conflict, not AlreadyExists.
  try {
    client_->update(config_maps_type(), fetched);
    FAIL() << "expected Conflict";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_conflict(e)) << e.what();
  }

  json patched = client_->patch_merge(config_maps_type(), "default", "c1", {{"data", {{"extra", "1"}}}});
  EXPECT_EQ(patched["data"]["k"], "v2");
  EXPECT_EQ(patched["data"]["extra"], "1");

  client_->remove(config_maps_type(), "default", "c1", PropagationPolicy::BACKGROUND);
  EXPECT_FALSE(client_->get_if_exists(config_maps_type(), "default", "c1").has_value());
  try {
    client_->remove(config_maps_type(), "default", "c1");
    FAIL() << "expected NotFound";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_not_found(e));
  }
}

TEST_F(KubeClientServerTest, ListWithSelectorsAndPaging) {
  for (int i = 0; i < 7; ++i) {
    client_->create(config_maps_type(), "default", config_map(std::string("m").append(std::to_string(i)), i % 2 ? "odd" : "even"));
  }
  ListOptions paged;
  paged.limit = 3;
  ListResult all = client_->list(config_maps_type(), "default", paged);
  EXPECT_EQ(all.items.size(), 7u);
  EXPECT_FALSE(all.resource_version.empty());
  paged.single_page = true;
  ListResult first = client_->list(config_maps_type(), "default", paged);
  EXPECT_EQ(first.items.size(), 3u);
  EXPECT_FALSE(first.continue_token.empty());

  ListOptions selected;
  selected.label_selector = "app in (odd),app!=even";
  EXPECT_EQ(client_->list(config_maps_type(), "default", selected).items.size(), 3u);
  selected.label_selector = "app=even";
  selected.field_selector = "metadata.name=m2";
  ListResult one = client_->list(config_maps_type(), "", selected);  // all namespaces
  ASSERT_EQ(one.items.size(), 1u);
  EXPECT_EQ(one.items[0]["metadata"]["name"], "m2");
  EXPECT_EQ(one.items[0]["kind"], "ConfigMap");
}

TEST_F(KubeClientServerTest, StatusSubresourceAndClusterScopedObjects) {
  client_->create(namespaces_type(), "", {{"metadata", {{"name", "team-a"}}}});
  json pod = {{"metadata", {{"name", "p1"}, {"namespace", "team-a"}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  json created = client_->create(pods_type(), "team-a", pod);
  created["status"] = {{"phase", "Running"}};
  client_->update_status(pods_type(), created);
  EXPECT_EQ(client_->get(pods_type(), "team-a", "p1")["status"]["phase"], "Running");
  client_->patch_merge(pods_type(), "team-a", "p1", {{"status", {{"phase", "Succeeded"}}}}, "status");
  EXPECT_EQ(client_->get(pods_type(), "team-a", "p1")["status"]["phase"], "Succeeded");
  EXPECT_TRUE(client_->get_if_exists(namespaces_type(), "", "team-a").has_value());
}

TEST_F(KubeClientServerTest, WatchSeesWritesInOrderAndStops) {
  ListResult start = client_->list(config_maps_type(), "default");
  std::mutex mu;
  std::vector<std::string> events;
  std::atomic<bool> stop{false};
  std::string last;
  std::jthread watcher([&] {
    WatchOptions options;
    options.resource_version = start.resource_version;
    options.timeout_seconds = 60;
    last = client_->watch(config_maps_type(), "default", options, [&](const WatchEvent& event) {
      if (event.type == "BOOKMARK") return true;
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(event.type + " " + event.object["metadata"].value("name", ""));
      return true;
    }, &stop);
  });
  json created = client_->create(config_maps_type(), "default", config_map("w1", "x"));
  client_->patch_merge(config_maps_type(), "default", "w1", {{"data", {{"k", "v9"}}}});
  client_->remove(config_maps_type(), "default", "w1");
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (events.size() >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto stop_time = Clock::now();
  stop = true;
  watcher.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - stop_time).count(), 2.0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(events, (std::vector<std::string>{"ADDED w1", "MODIFIED w1", "DELETED w1"}));
  EXPECT_FALSE(last.empty());
  EXPECT_NE(last, start.resource_version);
}

TEST_F(KubeClientServerTest, WatchFromCompactedHistoryIsGone) {
  ListResult start = client_->list(config_maps_type(), "default");
  client_->create(config_maps_type(), "default", config_map("g1", "x"));
  server_.compact_history();
  WatchOptions options;
  options.resource_version = start.resource_version;
  options.timeout_seconds = 5;
  try {
    client_->watch(config_maps_type(), "default", options, [](const WatchEvent&) { return true; });
    FAIL() << "expected 410";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_gone(e)) << e.what();
  }
}

TEST_F(KubeClientServerTest, EventsAggregateByReason) {
  json owner = client_->create(config_maps_type(), "default", config_map("owner", "x"));
  EventRecorder recorder(*client_, "qsync-operator");
  for (int i = 0; i < 3; ++i) recorder.record(owner, "Warning", "BackOff", "worker 2 restarting");
  recorder.record(owner, "Normal", "Scheduled", "placed");
  ListResult events = client_->list(events_type(), "default");
  ASSERT_EQ(events.items.size(), 2u);
  for (const json& event : events.items) {
    EXPECT_EQ(event["involvedObject"]["uid"], owner["metadata"]["uid"]);
    if (event["reason"] == "BackOff") {
      EXPECT_EQ(event["count"], 3);
      EXPECT_EQ(event["type"], "Warning");
    } else {
      EXPECT_EQ(event["count"], 1);
    }
  }
}

TEST_F(KubeClientServerTest, LeaseCreateRenewAndConflicts) {
  json lease = {{"metadata", {{"name", "qsync-operator"}, {"namespace", "default"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}, {"renewTime", "2026-11-29T20:00:00.000000Z"}}}};
  json created = client_->create(leases_type(), "default", lease);
  EXPECT_EQ(created["apiVersion"], "coordination.k8s.io/v1");
  json renewed = created;
  renewed["spec"]["renewTime"] = "2026-11-29T20:00:02.000000Z";
  json after = client_->update(leases_type(), renewed);
  EXPECT_EQ(after["spec"]["renewTime"], "2026-11-29T20:00:02.000000Z");
  // A second candidate holding the old version loses.
  json takeover = created;
  takeover["spec"]["holderIdentity"] = "b";
  EXPECT_THROW(
      {
        try {
          client_->update(leases_type(), takeover);
        } catch (const KubeError& e) {
          EXPECT_TRUE(is_conflict(e));
          throw;
        }
      },
      KubeError);
  // An injected 409 on the next lease update surfaces the same way.
  server_.fail_next({"update", "/leases/", 409, 1, ""});
  try {
    client_->update(leases_type(), after);
    FAIL() << "expected the injected conflict";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.code(), 409);
  }
  EXPECT_EQ(client_->get(leases_type(), "default", "qsync-operator")["spec"]["holderIdentity"], "a");
}

}  // namespace
}  // namespace qsync::kube
