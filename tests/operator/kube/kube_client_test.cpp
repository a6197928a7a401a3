// File: tests/operator/kube/kube_client_test.cpp
// The client's request/response verbs against a scripted HTTP server: each verb's method,
// path, query, content type and body; headers (bearer token, user agent); list paging with
// `continue`; Status answers as typed errors (409 AlreadyExists vs Conflict); transport
// failures; the observer's verb and code.
#include "operator/kube/kube_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <tuple>
#include <vector>

#include "tests/operator/kube/scripted_api_server.h"

namespace qsync::kube {
namespace {

using kube_test_support::json_answer;
using kube_test_support::ScriptedApiServer;

ClientOptions unlimited_options() {
  ClientOptions options;
  options.qps = 0;  // the tests measure behaviour, not pacing
  options.request_timeout_seconds = 10;
  return options;
}

// Answers every request with {"method", "path", "body"} so each verb's result can be checked.
http::HandlerResult echo(const http::HttpRequest& request) {
  json answer = {{"method", request.method}, {"path", request.path}};
  if (!request.body.empty()) answer["body"] = json::parse(request.body);
  return json_answer(200, answer);
}

TEST(KubeClientTest, EveryVerbSendsMethodPathQueryContentTypeAndBody) {
  ScriptedApiServer api(echo);
  KubeClient client(api.config("secret-token"), unlimited_options());
  json pod = {{"metadata", {{"name", "p1"}, {"namespace", "ns1"}, {"resourceVersion", "7"}}}, {"spec", {{"x", 1}}}};

  client.get(pods_type(), "ns1", "p1");
  client.create(pods_type(), "ns1", pod);
  client.update(pods_type(), pod);
  client.update_status(pods_type(), pod);
  client.patch_merge(leases_type(), "ns1", "leader", {{"spec", {{"holderIdentity", "me"}}}});
  client.patch_merge(pods_type(), "ns1", "p1", {{"status", {{"phase", "Running"}}}}, "status");
  client.apply(pods_type(), pod, "qsync-operator");
  client.remove(pods_type(), "ns1", "p1", PropagationPolicy::FOREGROUND);
  client.remove(config_maps_type(), "ns1", "c1");

  std::vector<http::HttpRequest> seen = api.requests();
  ASSERT_EQ(seen.size(), 9u);
  std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"GET", "/api/v1/namespaces/ns1/pods/p1", ""},
      {"POST", "/api/v1/namespaces/ns1/pods", "application/json"},
      {"PUT", "/api/v1/namespaces/ns1/pods/p1", "application/json"},
      {"PUT", "/api/v1/namespaces/ns1/pods/p1/status", "application/json"},
      {"PATCH", "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/leader", "application/merge-patch+json"},
      {"PATCH", "/api/v1/namespaces/ns1/pods/p1/status", "application/merge-patch+json"},
      {"PATCH", "/api/v1/namespaces/ns1/pods/p1", "application/apply-patch+yaml"},
      {"DELETE", "/api/v1/namespaces/ns1/pods/p1", "application/json"},
      {"DELETE", "/api/v1/namespaces/ns1/configmaps/c1", ""},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(seen[i].method, std::get<0>(expected[i]));
    EXPECT_EQ(seen[i].path, std::get<1>(expected[i]));
    EXPECT_EQ(seen[i].header("content-type"), std::get<2>(expected[i]));
    EXPECT_EQ(seen[i].header("authorization"), "Bearer secret-token");
    EXPECT_EQ(seen[i].header("user-agent"), "qsync-operator");
    EXPECT_EQ(seen[i].header("accept"), "application/json");
  }
  // Bodies: create and update carry the object with its type filled in and its resourceVersion.
  json created = json::parse(seen[1].body);
  EXPECT_EQ(created["kind"], "Pod");
  EXPECT_EQ(created["apiVersion"], "v1");
  EXPECT_EQ(created["spec"]["x"], 1);
  EXPECT_EQ(json::parse(seen[2].body)["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(json::parse(seen[4].body), json({{"spec", {{"holderIdentity", "me"}}}}));
  EXPECT_EQ(json::parse(seen[5].body)["status"]["phase"], "Running");
  // Server-side apply: fieldManager and force in the query, the whole object as the body.
  EXPECT_EQ(seen[6].param("fieldManager"), "qsync-operator");
  EXPECT_EQ(seen[6].param("force"), "true");
  EXPECT_EQ(json::parse(seen[6].body)["kind"], "Pod");
  // Delete with a propagation policy: DeleteOptions body and the query parameter.
  EXPECT_EQ(seen[7].param("propagationPolicy"), "Foreground");
  EXPECT_EQ(json::parse(seen[7].body)["propagationPolicy"], "Foreground");
  EXPECT_EQ(json::parse(seen[7].body)["kind"], "DeleteOptions");
  EXPECT_TRUE(seen[8].body.empty());
  EXPECT_EQ(seen[8].raw_target, "/api/v1/namespaces/ns1/configmaps/c1");
}

TEST(KubeClientTest, CreateUsesTheObjectsNamespaceThenTheConfigsAndGetFillsTypeFields) {
  ScriptedApiServer api([](const http::HttpRequest& request) {
    if (request.method == "GET") return json_answer(200, {{"metadata", {{"name", "l"}}}});
    return echo(request);
  });
  KubeClient client(api.config(), unlimited_options());
  client.create(config_maps_type(), "", {{"metadata", {{"name", "c"}, {"namespace", "from-object"}}}});
  client.create(config_maps_type(), "", {{"metadata", {{"name", "c"}}}});
  client.create(nodes_type(), "", {{"metadata", {{"name", "n"}}}});
  json lease = client.get(leases_type(), "kube-system", "l");
  EXPECT_EQ(lease["kind"], "Lease");
  EXPECT_EQ(lease["apiVersion"], "coordination.k8s.io/v1");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].path, "/api/v1/namespaces/from-object/configmaps");
  EXPECT_EQ(seen[1].path, "/api/v1/namespaces/default/configmaps");
  EXPECT_EQ(seen[2].path, "/api/v1/nodes");
  EXPECT_THROW(client.update(pods_type(), json{{"metadata", json::object()}}), std::invalid_argument);
  KubeConfig ftp = api.config();
  ftp.server = "ftp://x";
  EXPECT_THROW(KubeClient{ftp}, std::invalid_argument);
  KubeConfig missing_ca = api.config();
  missing_ca.ca_file = "/nonexistent/ca.crt";
  EXPECT_THROW(KubeClient{missing_ca}, std::runtime_error);
}

TEST(KubeClientTest, ListEncodesSelectorsAndFollowsContinueTokens) {
  // Five pods served two at a time; the continue token is the index of the next item.
  ScriptedApiServer api([](const http::HttpRequest& request) {
    size_t start = request.param("continue").empty() ? 0 : std::stoul(request.param("continue"));
    size_t limit = std::stoul(request.param("limit", "100"));
    json items = json::array();
    for (size_t i = start; i < std::min<size_t>(start + limit, 5); ++i) {
      items.push_back({{"metadata", {{"name", std::string("p").append(std::to_string(i))}}}});
    }
    json metadata = {{"resourceVersion", "42"}};
    if (start + limit < 5) metadata["continue"] = std::to_string(start + limit);
    return json_answer(200, {{"kind", "PodList"}, {"apiVersion", "v1"}, {"metadata", metadata}, {"items", items}});
  });
  KubeClient client(api.config(), unlimited_options());
  ListOptions options;
  options.label_selector = "app=x,tier in (a,b),!gone";
  options.field_selector = "metadata.name!=p9";
  options.limit = 2;
  options.resource_version = "0";
  ListResult all = client.list(pods_type(), "team-a", options);
  ASSERT_EQ(all.items.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(all.items[i]["metadata"]["name"], std::string("p").append(std::to_string(i)));
  EXPECT_EQ(all.items[0]["kind"], "Pod");  // list items get their type back
  EXPECT_EQ(all.resource_version, "42");
  EXPECT_TRUE(all.continue_token.empty());

  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].path, "/api/v1/namespaces/team-a/pods");
  EXPECT_EQ(seen[0].param("labelSelector"), "app=x,tier in (a,b),!gone");
  EXPECT_EQ(seen[0].param("fieldSelector"), "metadata.name!=p9");
  EXPECT_NE(seen[0].raw_target.find("labelSelector=app%3Dx%2Ctier%20in%20%28a%2Cb%29%2C%21gone"), std::string::npos)
      << seen[0].raw_target;
  EXPECT_EQ(seen[0].param("limit"), "2");
  EXPECT_EQ(seen[0].param("resourceVersion"), "0");
  EXPECT_EQ(seen[1].param("continue"), "2");
  EXPECT_EQ(seen[1].param("resourceVersion"), "");  // not allowed together with continue
  EXPECT_EQ(seen[1].param("labelSelector"), "app=x,tier in (a,b),!gone");
  EXPECT_EQ(seen[2].param("continue"), "4");

  options.single_page = true;
  ListResult page = client.list(pods_type(), "", options);
  EXPECT_EQ(page.items.size(), 2u);
  EXPECT_EQ(page.continue_token, "2");
  EXPECT_EQ(api.requests().back().path, "/api/v1/pods");  // all namespaces
  options.continue_token = page.continue_token;
  ListResult next = client.list(pods_type(), "", options);
  ASSERT_EQ(next.items.size(), 2u);
  EXPECT_EQ(next.items[0]["metadata"]["name"], "p2");
}

TEST(KubeClientTest, StatusAnswersBecomeTypedErrorsAndReachTheObserver) {
  ScriptedApiServer api([](const http::HttpRequest& request) {
    if (request.method == "GET") {
      std::string name = request.path.substr(request.path.rfind('/') + 1);
      return json_answer(404, kube_status_json(404, "NotFound", std::string("pods \"").append(name).append("\" not found")));
    }
    if (request.method == "POST") return json_answer(409, kube_status_json(409, "AlreadyExists", "pods \"p1\" already exists"));
    if (request.method == "PUT") {
      return json_answer(409, kube_status_json(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again"));
    }
    http::HandlerResult plain;
    plain.response.status = 500;
    plain.response.body = "upstream exploded";
    return plain;
  });
  std::mutex mu;
  std::vector<std::pair<std::string, int>> observed;
  ClientOptions options = unlimited_options();
  options.observer = [&](const std::string& verb, int code, double seconds) {
    EXPECT_GE(seconds, 0.0);
    std::lock_guard<std::mutex> lock(mu);
    observed.emplace_back(verb, code);
  };
  KubeClient client(api.config(), options);
  json pod = {{"metadata", {{"name", "p1"}, {"namespace", "default"}, {"resourceVersion", "1"}}}};

  try {
    client.get(pods_type(), "default", "p1");
    FAIL() << "expected NotFound";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.code(), 404);
    EXPECT_EQ(e.reason(), "NotFound");
    EXPECT_EQ(e.api_message(), "pods \"p1\" not found");
    EXPECT_EQ(e.verb(), "get");
    EXPECT_EQ(e.path(), "/api/v1/namespaces/default/pods/p1");
  }
  EXPECT_FALSE(client.get_if_exists(pods_type(), "default", "p2").has_value());
  try {
    client.create(pods_type(), "default", pod);
    FAIL() << "expected AlreadyExists";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_already_exists(e));
    EXPECT_FALSE(is_conflict(e));
  }
  try {
    client.update(pods_type(), pod);
    FAIL() << "expected Conflict";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_conflict(e));
    EXPECT_FALSE(is_already_exists(e));
    EXPECT_EQ(e.verb(), "update");
  }
  try {
    client.remove(pods_type(), "default", "p1");
    FAIL() << "expected InternalError";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.code(), 500);
    EXPECT_EQ(e.reason(), "InternalError");
    EXPECT_NE(e.api_message().find("upstream exploded"), std::string::npos);
  }
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::pair<std::string, int>> expected = {
      {"get", 404}, {"get", 404}, {"create", 409}, {"update", 409}, {"delete", 500}};
  EXPECT_EQ(observed, expected);
}

TEST(KubeClientTest, RawRequestReportsItsVerb) {
  ScriptedApiServer api(echo);
  std::vector<std::pair<std::string, int>> observed;
  ClientOptions options = unlimited_options();
  options.observer = [&](const std::string& verb, int code, double) { observed.emplace_back(verb, code); };
  KubeClient client(api.config(), options);
  json answer = client.request("PATCH", "/api/v1/namespaces/a/pods/b?dryRun=All", json{{"x", 1}},
                               "application/json-patch+json");
  EXPECT_EQ(answer["method"], "PATCH");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].param("dryRun"), "All");
  EXPECT_EQ(seen[0].header("content-type"), "application/json-patch+json");
  ASSERT_EQ(observed.size(), 1u);
  EXPECT_EQ(observed[0], std::make_pair(std::string("patch"), 200));
}

// A loopback port with nothing listening: bound, then closed.
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(KubeClientTest, TransportFailuresAreCodeZeroAndNameTheServer) {
  KubeConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(closed_port());
  config.source = "test";
  std::vector<int> codes;
  ClientOptions options = unlimited_options();
  options.observer = [&](const std::string&, int code, double) { codes.push_back(code); };
  KubeClient client(config, options);
  try {
    client.get(pods_type(), "default", "p1");
    FAIL() << "expected a transport error";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_transport(e));
    EXPECT_EQ(e.reason(), "Transport");
    EXPECT_NE(std::string(e.what()).find(config.server), std::string::npos) << e.what();
  }
  EXPECT_EQ(codes, std::vector<int>{0});
}

TEST(KubeClientTest, RequestsPassTheTokenBucket) {
  ScriptedApiServer api(echo);
  ClientOptions options = unlimited_options();
  options.qps = 20;
  options.burst = 2;
  KubeClient client(api.config(), options);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) client.get(pods_type(), "default", "p");  // 2 free, 4 at 50 ms
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(elapsed, 0.15);
  EXPECT_LT(elapsed, 5.0);
}

TEST(KubeClientTest, TimestampsFormatAndParse) {
  EXPECT_EQ(kube_time_format(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(kube_time_format(1795897910), "2026-11-28T20:31:50Z");
  EXPECT_DOUBLE_EQ(kube_time_parse("2026-11-28T20:31:50Z"), 1795897910);
  EXPECT_DOUBLE_EQ(kube_time_parse("2026-11-28T20:31:50.250000Z"), 1795897910.25);
  EXPECT_DOUBLE_EQ(kube_time_parse("2026-11-28T21:31:50+01:00"), 1795897910);
  double now = kube_time_parse(kube_time_now());
  EXPECT_GT(now, 1.7e9);
  EXPECT_THROW(kube_time_parse("yesterday"), std::invalid_argument);
  EXPECT_THROW(kube_time_parse("2026-11-28 20:31:50"), std::invalid_argument);
  EXPECT_THROW(kube_time_parse("2026-11-28T20:31:50"), std::invalid_argument);
  EXPECT_THROW(kube_time_parse("2026-13-28T20:31:50Z"), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::kube
