// File: tests/operator/kube/events_test.cpp
// EventRecorder against a scripted server holding Events in memory: the first occurrence
// creates an Event with the fields kubectl shows, repeats merge-patch count and lastTimestamp,
// a different message is a new Event, an expired Event (404 on PATCH) is created again, and
// failures never throw.
#include "operator/kube/events.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "tests/operator/kube/scripted_api_server.h"

namespace qsync::kube {
namespace {

using kube_test_support::json_answer;
using kube_test_support::ScriptedApiServer;

// Events by name, created by POST and merged by PATCH; `fail_creates` answers POSTs with 500.
struct EventStore {
  std::mutex mu;
  std::map<std::string, json> events;
  bool fail_creates = false;

  http::HandlerResult handle(const http::HttpRequest& request) {
    std::lock_guard<std::mutex> lock(mu);
    if (request.method == "POST") {
      if (fail_creates) return json_answer(500, kube_status_json(500, "InternalError", "etcd is down"));
      json event = json::parse(request.body);
      events[event["metadata"]["name"]] = event;
      return json_answer(201, event);
    }
    if (request.method == "PATCH") {
      std::string name = request.path.substr(request.path.rfind('/') + 1);
      auto it = events.find(name);
      if (it == events.end()) return json_answer(404, kube_status_json(404, "NotFound", "event not found: " + name));
      it->second.merge_patch(json::parse(request.body));
      return json_answer(200, it->second);
    }
    return json_answer(405, kube_status_json(405, "MethodNotAllowed", request.method));
  }
};

ClientOptions unlimited_options() {
  ClientOptions options;
  options.qps = 0;
  return options;
}

json job_object() {
  return {{"apiVersion", "qsync.io/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "job-1"}, {"namespace", "team-a"}, {"uid", "uid-123"}, {"resourceVersion", "9"}}}};
}

TEST(EventRecorderTest, FirstOccurrenceCreatesThenRepeatsPatchCount) {
  EventStore store;
  ScriptedApiServer api([&](const http::HttpRequest& r) { return store.handle(r); });
  KubeClient client(api.config(), unlimited_options());
  EventRecorder recorder(client, "qsync-operator");

  recorder.record(job_object(), "Normal", "Scheduled", "placed 4 workers");
  recorder.record(job_object(), "Normal", "Scheduled", "placed 4 workers");
  recorder.record(job_object(), "Normal", "Scheduled", "placed 4 workers");

  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/api/v1/namespaces/team-a/events");
  EXPECT_EQ(seen[1].method, "PATCH");
  EXPECT_EQ(seen[1].header("content-type"), "application/merge-patch+json");
  EXPECT_EQ(json::parse(seen[1].body)["count"], 2);
  EXPECT_TRUE(json::parse(seen[1].body).contains("lastTimestamp"));
  EXPECT_EQ(json::parse(seen[2].body)["count"], 3);

  std::lock_guard<std::mutex> lock(store.mu);
  ASSERT_EQ(store.events.size(), 1u);
  const json& event = store.events.begin()->second;
  EXPECT_EQ(event["count"], 3);
  EXPECT_EQ(event["kind"], "Event");
  EXPECT_EQ(event["metadata"]["namespace"], "team-a");
  EXPECT_EQ(event["metadata"]["name"].get<std::string>().rfind("job-1.", 0), 0u);
  EXPECT_EQ(event["involvedObject"]["kind"], "HybridTrainingJob");
  EXPECT_EQ(event["involvedObject"]["apiVersion"], "qsync.io/v1alpha1");
  EXPECT_EQ(event["involvedObject"]["name"], "job-1");
  EXPECT_EQ(event["involvedObject"]["namespace"], "team-a");
  EXPECT_EQ(event["involvedObject"]["uid"], "uid-123");
  EXPECT_EQ(event["reason"], "Scheduled");
  EXPECT_EQ(event["message"], "placed 4 workers");
  EXPECT_EQ(event["type"], "Normal");
  EXPECT_EQ(event["source"]["component"], "qsync-operator");
  EXPECT_EQ(event["reportingComponent"], "qsync-operator");
  EXPECT_LE(kube_time_parse(event["firstTimestamp"]), kube_time_parse(event["lastTimestamp"]));
}

TEST(EventRecorderTest, DifferentReasonMessageOrObjectMakeNewEvents) {
  EventStore store;
  ScriptedApiServer api([&](const http::HttpRequest& r) { return store.handle(r); });
  KubeClient client(api.config(), unlimited_options());
  EventRecorder recorder(client, "qsync-operator");
  json other = job_object();
  other["metadata"]["uid"] = "uid-456";
  recorder.record(job_object(), "Normal", "Scheduled", "placed 4 workers");
  recorder.record(job_object(), "Normal", "Scheduled", "placed 8 workers");
  recorder.record(job_object(), "Warning", "Preempted", "placed 4 workers");
  recorder.record(other, "Normal", "Scheduled", "placed 4 workers");
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "gpu-1"}, {"uid", "n1"}}}};
  recorder.record(node, "Warning", "Lent", "GPU lent to inference");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 5u);
  for (const auto& request : seen) EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(seen[4].path, "/api/v1/namespaces/default/events");  // cluster-scoped object
  std::lock_guard<std::mutex> lock(store.mu);
  EXPECT_EQ(store.events.size(), 5u);
}

TEST(EventRecorderTest, ExpiredEventIsCreatedAgain) {
  EventStore store;
  ScriptedApiServer api([&](const http::HttpRequest& r) { return store.handle(r); });
  KubeClient client(api.config(), unlimited_options());
  EventRecorder recorder(client, "qsync-operator");
  recorder.record(job_object(), "Warning", "BackOff", "worker 3 restarting");
  {
    std::lock_guard<std::mutex> lock(store.mu);
    store.events.clear();  // the API server's TTL removed it
  }
  recorder.record(job_object(), "Warning", "BackOff", "worker 3 restarting");
  recorder.record(job_object(), "Warning", "BackOff", "worker 3 restarting");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[1].method, "PATCH");
  EXPECT_EQ(seen[2].method, "POST");
  EXPECT_EQ(seen[3].method, "PATCH");
  std::lock_guard<std::mutex> lock(store.mu);
  ASSERT_EQ(store.events.size(), 1u);
  EXPECT_EQ(store.events.begin()->second["count"], 2);
}

TEST(EventRecorderTest, FailuresAreLoggedNotThrown) {
  EventStore store;
  store.fail_creates = true;
  ScriptedApiServer api([&](const http::HttpRequest& r) { return store.handle(r); });
  KubeClient client(api.config(), unlimited_options());
  EventRecorder recorder(client, "qsync-operator");
  EXPECT_NO_THROW(recorder.record(job_object(), "Normal", "Scheduled", "x"));
  store.fail_creates = false;
  // Not aggregated after a failed create: the next occurrence creates it.
  recorder.record(job_object(), "Normal", "Scheduled", "x");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].method, "POST");
}

}  // namespace
}  // namespace qsync::kube
