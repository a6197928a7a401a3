// File: tests/operator/controller/health_server_test.cpp
// /healthz and /readyz over HTTP: ok by default, named checks, a failing check turns the answer
// into 500 naming it, ?verbose lists every check, /readyz/NAME runs one check.
#include "operator/controller/health_server.h"

#include <gtest/gtest.h>

#include <atomic>

#include "tests/support/http_client.h"

namespace qsync::controller {
namespace {

TEST(HealthServer, HealthzIsOkWhileServing) {
  HealthServer server("127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  const auto answer = test::http_get("127.0.0.1", server.port(), "/healthz");
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "ok");
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/readyz").status, 200) << "no readiness checks: ready";
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/nothing").status, 404);
}

TEST(HealthServer, ReadyzFollowsItsChecks) {
  HealthServer server("127.0.0.1", 0);
  std::atomic<bool> synced{false};
  server.add_ready_check("informers-synced", [&]() -> std::optional<std::string> {
    if (synced) return std::nullopt;
    return "informer pods has not listed yet";
  });
  server.add_ready_check("leader-election", [] { return std::optional<std::string>(); });

  auto answer = test::http_get("127.0.0.1", server.port(), "/readyz");
  EXPECT_EQ(answer.status, 500);
  EXPECT_NE(answer.body.find("[-]informers-synced failed: informer pods has not listed yet"), std::string::npos)
      << answer.body;
  EXPECT_NE(answer.body.find("[+]leader-election ok"), std::string::npos) << answer.body;
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/healthz").status, 200) << "readiness does not affect liveness";

  synced = true;
  answer = test::http_get("127.0.0.1", server.port(), "/readyz");
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "ok");
  answer = test::http_get("127.0.0.1", server.port(), "/readyz?verbose");
  EXPECT_NE(answer.body.find("[+]informers-synced ok"), std::string::npos) << answer.body;
  EXPECT_NE(answer.body.find("readyz check passed"), std::string::npos) << answer.body;
}

TEST(HealthServer, SingleChecksByName) {
  HealthServer server("127.0.0.1", 0);
  server.add_health_check("deadlock", [] { return std::optional<std::string>("worker 2 stuck for 600 s"); });
  server.add_ready_check("fine", [] { return std::optional<std::string>(); });
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/healthz").status, 500);
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/healthz/ping").status, 200);
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/healthz/deadlock").status, 500);
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/readyz/fine").status, 200);
  EXPECT_EQ(test::http_get("127.0.0.1", server.port(), "/readyz/unknown").status, 404);
}

TEST(HealthServer, ACheckThatThrowsFails) {
  HealthServer server("127.0.0.1", 0);
  server.add_ready_check("throws", []() -> std::optional<std::string> { throw std::runtime_error("boom"); });
  const auto answer = test::http_get("127.0.0.1", server.port(), "/readyz");
  EXPECT_EQ(answer.status, 500);
  EXPECT_NE(answer.body.find("check threw: boom"), std::string::npos) << answer.body;
}

TEST(HealthServer, BindFailureNamesTheAddress) {
  HealthServer first("127.0.0.1", 0);
  try {
    HealthServer second("127.0.0.1", first.port());
    FAIL() << "binding a taken port succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync::controller
