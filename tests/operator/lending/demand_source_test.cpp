// File: tests/operator/lending/demand_source_test.cpp
// Demand samples from Prometheus answers: vectors added up, scalars, no series, PromQL errors,
// bodies that are not JSON, NaN; and PrometheusDemandSource over HTTP against a stand-in
// server (the query sent URL-encoded) and against a closed port.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "operator/http/http_server.h"
#include "operator/lending/demand_source.h"

namespace qsync::lending {
namespace {

TEST(DemandSourceTest, AnswersBecomeSamples) {
  DemandSample s = demand_sample_from_prometheus(
      200,
      R"({"status":"success","data":{"resultType":"vector","result":[)"
      R"({"metric":{"pod":"a"},"value":[1700000000.5,"12.5"]},{"metric":{"pod":"b"},"value":[1700000000.5,"7.5"]}]}})",
      "rate(x[1m])");
  ASSERT_TRUE(s.ok) << s.error;
  EXPECT_DOUBLE_EQ(s.value, 20);
  EXPECT_DOUBLE_EQ(s.at, 1700000000.5);
  s = demand_sample_from_prometheus(200, R"({"status":"success","data":{"resultType":"scalar","result":[1700000001,"3"]}})", "3");
  ASSERT_TRUE(s.ok) << s.error;
  EXPECT_DOUBLE_EQ(s.value, 3);
  s = demand_sample_from_prometheus(200, R"({"status":"success","data":{"resultType":"vector","result":[]}})", "up{job=\"x\"}");
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.error.find("no series"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("up{job=\"x\"}"), std::string::npos) << s.error;
  s = demand_sample_from_prometheus(400, R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})", "ra(");
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.error.find("parse error at char 3"), std::string::npos) << s.error;
  EXPECT_FALSE(demand_sample_from_prometheus(502, "<html>bad gateway</html>", "x").ok);
  EXPECT_FALSE(demand_sample_from_prometheus(
                   200, R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}})", "x")
                   .ok);
  EXPECT_FALSE(demand_sample_from_prometheus(200, R"({"status":"success","data":{"resultType":"matrix","result":[]}})", "x[1m]").ok);
}

TEST(DemandSourceTest, QueriesAPrometheusOverHttp) {
  std::string seen_query;
  http::HttpServer server("127.0.0.1", 0, [&](const http::HttpRequest& req) {
    http::HandlerResult r;
    seen_query = req.param("query");
    r.response.headers["Content-Type"] = "application/json";
    r.response.body = req.path == "/api/v1/query"
                          ? R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"42"]}]}})"
                          : "{}";
    return r;
  });
  PrometheusDemandSource source(2);
  const DemandSample s = source.sample(server.url(), "sum(rate(requests_total{app=\"chat\"}[30s]))");
  ASSERT_TRUE(s.ok) << s.error;
  EXPECT_DOUBLE_EQ(s.value, 42);
  EXPECT_EQ(seen_query, "sum(rate(requests_total{app=\"chat\"}[30s]))");
  server.stop();
  const DemandSample down = source.sample(server.url(), "x");
  EXPECT_FALSE(down.ok);
  EXPECT_NE(down.error.find("unreachable"), std::string::npos) << down.error;
}

}  // namespace
}  // namespace qsync::lending
