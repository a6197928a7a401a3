// File: tests/kube_api_server/api_server_watch_test.cpp
// The Kubernetes API test server's watch (replay, resume, 410 after compaction, bookmarks,
// close_watches and dropped connections over real HTTP), deletion (finalizers, Background /
// Foreground / Orphan garbage collection), fault injection (in-process and the /_test/faults
// endpoint) and the local kubelet running Pods as processes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_server.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kConfigMaps = "/api/v1/namespaces/default/configmaps";

struct Answer {
  int status;
  json body;
};

Answer call(ApiServer& s, const std::string& method, const std::string& target, const json& body = nullptr,
            const std::string& content_type = "application/json") {
  std::map<std::string, std::string> headers;
  if (!body.is_null()) headers["Content-Type"] = content_type;
  auto res = s.call(method, target, body.is_null() ? "" : body.dump(), headers);
  json parsed = json::parse(res.body, nullptr, false);
  return {res.status, parsed.is_discarded() ? json(res.body) : parsed};
}

// The watch events of a finished in-process watch.
std::vector<json> events_of(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

json config_map(const std::string& name, json extra_meta = json::object()) {
  json meta = {{"name", name}};
  meta.update(extra_meta);
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", meta}, {"data", {{"k", "v"}}}};
}

// A raw HTTP watch over loopback: reads the chunked stream as it arrives.
class WatchConnection {
 public:
  WatchConnection(int port, const std::string& target) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect failed");
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n";
    ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL);
  }
  ~WatchConnection() { ::close(fd_); }
  // Waits up to 10 s for `needle`; true when seen.
  bool wait_for(const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (data_.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline && !closed_) read_some();
    return data_.find(needle) != std::string::npos;
  }
  // True when the server ended the response (terminating chunk) or closed within 10 s.
  bool wait_ended() {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!closed_ && data_.find("\r\n0\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() < deadline) read_some();
    return closed_ || data_.find("\r\n0\r\n\r\n") != std::string::npos;
  }
  bool closed() const { return closed_; }

 private:
  void read_some() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) return;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed_ = true;
      return;
    }
    data_.append(buf, static_cast<size_t>(n));
  }
  int fd_;
  bool closed_ = false;
  std::string data_;
};

TEST(ApiServerWatchTest, ReplaysCurrentObjectsThenFollowsFromAResourceVersion) {
  ApiServer server;
  call(server, "POST", kConfigMaps, config_map("a"));
  auto replay = events_of(server.call("GET", kConfigMaps + "?watch=1&timeoutSeconds=0").body);
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0]["type"], "ADDED");
  std::string rv = server.current_resource_version();
  call(server, "POST", kConfigMaps, config_map("b"));
  json b = call(server, "GET", kConfigMaps + "/b").body;
  b["data"]["k"] = "w";
  call(server, "PUT", kConfigMaps + "/b", b);
  call(server, "DELETE", kConfigMaps + "/b");
  auto events = events_of(server.call("GET", kConfigMaps + "?watch=true&timeoutSeconds=0&resourceVersion=" + rv).body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["type"], "ADDED");
  EXPECT_EQ(events[1]["type"], "MODIFIED");
  EXPECT_EQ(events[1]["object"]["data"]["k"], "w");
  EXPECT_EQ(events[2]["type"], "DELETED");
  auto selected = events_of(server.call("GET", kConfigMaps + "?watch=1&timeoutSeconds=0&fieldSelector=metadata.name%3Da").body);
  EXPECT_EQ(selected.size(), 1u);
}

TEST(ApiServerWatchTest, CompactedOrTrimmedHistoryAnswersGone) {
  ServerOptions options;
  options.history_limit = 3;
  ApiServer server(options);
  std::string rv = server.current_resource_version();
  for (const char* name : {"c0", "c1", "c2", "c3", "c4"}) call(server, "POST", kConfigMaps, config_map(name));
  auto trimmed = call(server, "GET", kConfigMaps + "?watch=1&timeoutSeconds=0&resourceVersion=" + rv);
  EXPECT_EQ(trimmed.status, 410);
  EXPECT_EQ(trimmed.body["reason"], "Expired");
  std::string recent = server.current_resource_version();
  EXPECT_EQ(events_of(server.call("GET", kConfigMaps + "?watch=1&timeoutSeconds=0&resourceVersion=" + recent).body).size(), 0u);
  call(server, "POST", kConfigMaps, config_map("late"));
  server.compact_history();
  EXPECT_EQ(call(server, "GET", kConfigMaps + "?watch=1&timeoutSeconds=0&resourceVersion=" + recent).status, 410);
}

TEST(ApiServerWatchTest, BookmarksCarryTheResourceVersion) {
  ApiServer server;
  server.set_bookmark_interval(0ms);
  auto events = events_of(server.call("GET", kConfigMaps + "?watch=1&timeoutSeconds=1&allowWatchBookmarks=true").body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "BOOKMARK");
  EXPECT_EQ(events.back()["object"]["metadata"]["resourceVersion"], server.current_resource_version());
}

TEST(ApiServerWatchTest, StreamsOverHttpAndEndsOnCloseWatchesAndDrop) {
  ApiServer server;
  server.start();
  {
    WatchConnection watch(server.port(), kConfigMaps + "?watch=1");
    call(server, "POST", kConfigMaps, config_map("live"));
    ASSERT_TRUE(watch.wait_for("\"live\""));
    server.close_watches();
    EXPECT_TRUE(watch.wait_ended());
  }
  {
    WatchConnection watch(server.port(), kConfigMaps + "?watch=1&resourceVersion=" + server.current_resource_version());
    call(server, "POST", kConfigMaps, config_map("second"));
    ASSERT_TRUE(watch.wait_for("\"second\""));
    server.drop_connections();
    EXPECT_TRUE(watch.wait_ended());
    EXPECT_TRUE(watch.closed());
  }
  server.fail_next({"watch", "/configmaps", 410, 1, ""});
  WatchConnection gone(server.port(), kConfigMaps + "?watch=1");
  EXPECT_TRUE(gone.wait_for("\"ERROR\""));
  EXPECT_TRUE(gone.wait_for("\"code\":410"));
}

TEST(ApiServerWatchTest, FinalizersHoldDeletion) {
  ApiServer server;
  call(server, "POST", kConfigMaps, config_map("held", {{"finalizers", {"test/hold"}}}));
  auto deleting = call(server, "DELETE", kConfigMaps + "/held");
  ASSERT_EQ(deleting.status, 200);
  EXPECT_TRUE(deleting.body["metadata"].contains("deletionTimestamp"));
  json live = call(server, "GET", kConfigMaps + "/held").body;
  ASSERT_TRUE(live["metadata"].contains("deletionTimestamp"));
  auto patched = call(server, "PATCH", kConfigMaps + "/held", json{{"metadata", {{"finalizers", nullptr}}}},
                      "application/merge-patch+json");
  EXPECT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(call(server, "GET", kConfigMaps + "/held").status, 404);
}

TEST(ApiServerWatchTest, GarbageCollectionFollowsPropagationPolicy) {
  ApiServer server;
  auto owner_ref = [&](const std::string& owner) {
    json o = call(server, "GET", kConfigMaps + "/" + owner).body;
    return json{{"ownerReferences", {{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", owner}, {"uid", o["metadata"]["uid"]}}}}};
  };
  // Background: dependents go after the owner.
  call(server, "POST", kConfigMaps, config_map("owner1"));
  call(server, "POST", kConfigMaps, config_map("child1", owner_ref("owner1")));
  call(server, "DELETE", kConfigMaps + "/owner1");
  EXPECT_EQ(call(server, "GET", kConfigMaps + "/child1").status, 404);
  // Orphan: dependents stay, without the reference.
  call(server, "POST", kConfigMaps, config_map("owner2"));
  call(server, "POST", kConfigMaps, config_map("child2", owner_ref("owner2")));
  call(server, "DELETE", kConfigMaps + "/owner2?propagationPolicy=Orphan");
  auto orphan = call(server, "GET", kConfigMaps + "/child2");
  ASSERT_EQ(orphan.status, 200);
  EXPECT_FALSE(orphan.body["metadata"].contains("ownerReferences"));
  // Foreground: the owner waits for a dependent held by a finalizer.
  call(server, "POST", kConfigMaps, config_map("owner3"));
  json held = owner_ref("owner3");
  held["finalizers"] = {"test/hold"};
  call(server, "POST", kConfigMaps, config_map("child3", held));
  auto fg = call(server, "DELETE", kConfigMaps + "/owner3", json{{"propagationPolicy", "Foreground"}});
  EXPECT_EQ(fg.status, 200);
  json owner = call(server, "GET", kConfigMaps + "/owner3").body;
  EXPECT_EQ(owner["metadata"]["finalizers"], json({"foregroundDeletion"}));
  EXPECT_TRUE(call(server, "GET", kConfigMaps + "/child3").body["metadata"].contains("deletionTimestamp"));
  call(server, "PATCH", kConfigMaps + "/child3", json{{"metadata", {{"finalizers", nullptr}}}}, "application/merge-patch+json");
  EXPECT_EQ(call(server, "GET", kConfigMaps + "/child3").status, 404);
  EXPECT_EQ(call(server, "GET", kConfigMaps + "/owner3").status, 404);
}

TEST(ApiServerWatchTest, InjectedFaultsFailTheNextMatchingRequests) {
  ApiServer server;
  call(server, "POST", kConfigMaps, config_map("f"));
  server.fail_next({"update", "/configmaps/f", 409, 2, ""});
  json f = call(server, "GET", kConfigMaps + "/f").body;
  EXPECT_EQ(call(server, "GET", kConfigMaps + "/f").status, 200);  // reads are not matched
  EXPECT_EQ(call(server, "PUT", kConfigMaps + "/f", f).status, 409);
  EXPECT_EQ(call(server, "PUT", kConfigMaps + "/f", f).status, 409);
  EXPECT_EQ(call(server, "PUT", kConfigMaps + "/f", f).status, 200);

  auto admin = call(server, "POST", "/_test/faults", json{{"fail", {{"verb", "write"}, {"path", "/configmaps"}, {"code", 500}}}, {"delayMs", 30}});
  ASSERT_EQ(admin.status, 200) << admin.body;
  auto start = std::chrono::steady_clock::now();
  auto failed = call(server, "POST", kConfigMaps, config_map("g"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(failed.body["reason"], "InternalError");
  EXPECT_EQ(call(server, "DELETE", "/_test/faults").status, 200);
  EXPECT_EQ(call(server, "POST", kConfigMaps, config_map("g")).status, 201);
  EXPECT_EQ(call(server, "POST", "/_test/faults", json("not an object")).status, 400);
}

TEST(ApiServerWatchTest, LocalKubeletRunsPodsAsProcesses) {
  ServerOptions options;
  options.local_kubelet = true;
  options.kubelet_log_dir = (std::filesystem::temp_directory_path() / (std::to_string(::getpid()).insert(0, "kubelet-test-"))).string();
  ApiServer server(options);
  auto pod = [](const std::string& name, const std::string& script) {
    return json{{"metadata", {{"name", name}}},
                {"spec",
                 {{"terminationGracePeriodSeconds", 1},
                  {"containers",
                   {{{"name", "main"},
                     {"image", "local"},
                     {"command", {"/bin/sh", "-c", script}},
                     {"env", {{{"name", "GREETING"}, {"value", "hello"}},
                              {{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}}}}}}}}};
  };
  const std::string pods = "/api/v1/namespaces/default/pods";
  ASSERT_EQ(call(server, "POST", pods, pod("ok", "echo $GREETING $POD_NAME")).status, 201);
  ASSERT_EQ(call(server, "POST", pods, pod("bad", "exit 3")).status, 201);
  ASSERT_EQ(call(server, "POST", pods, pod("long", "sleep 60")).status, 201);
  auto phase_of = [&](const std::string& name) {
    json pod = server.get_object("v1", "pods", "default", name);
    return pod.contains("status") ? pod["status"].value("phase", "") : std::string();
  };
  auto wait_phase = [&](const std::string& name, const std::string& phase) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (phase_of(name) != phase && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
    return phase_of(name);
  };
  EXPECT_EQ(wait_phase("ok", "Succeeded"), "Succeeded");
  EXPECT_EQ(wait_phase("bad", "Failed"), "Failed");
  EXPECT_EQ(wait_phase("long", "Running"), "Running");
  json bad = server.get_object("v1", "pods", "default", "bad");
  EXPECT_EQ(bad["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
  EXPECT_EQ(bad["spec"]["nodeName"], "local");
  EXPECT_EQ(server.get_object("v1", "pods", "default", "long")["status"]["podIP"], "127.0.0.1");
  std::ifstream log(server.kubelet_log_path("default", "ok"));
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "hello ok");

  json long_pod = server.get_object("v1", "pods", "default", "long");
  int pid = std::stoi(long_pod["status"]["containerStatuses"][0]["containerID"].get<std::string>().substr(8));
  ASSERT_EQ(call(server, "DELETE", pods + "/long").status, 200);
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (::kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_NE(::kill(pid, 0), 0) << "the deleted Pod's process is still running";
  std::filesystem::remove_all(options.kubelet_log_dir);
}

}  // namespace
}  // namespace qsync::kube_test
