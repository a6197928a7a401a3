// File: tests/operator/controller/operator_metrics_test.cpp
// The operator's metrics under controller-runtime's names, scraped over HTTP from the Exposer,
// fed by the API client's observer hook and by a work queue.
#include "operator/controller/operator_metrics.h"

#include <gtest/gtest.h>

#include "tests/support/http_client.h"
#include "tests/support/metrics_text.h"

namespace qsync::controller {
namespace {

TEST(OperatorMetrics, ServesControllerRuntimeNamesOverHttp) {
  OperatorMetrics metrics;
  const int port = metrics.serve("127.0.0.1", 0);
  ASSERT_GT(port, 0);
  metrics.reconcile_finished("jobs", "success", 0.02);
  metrics.reconcile_finished("jobs", "success", 0.03);
  metrics.reconcile_finished("jobs", "requeue_after", 0.01);
  metrics.reconcile_error("jobs");
  metrics.set_active_workers("jobs", 2);
  metrics.set_max_concurrent_reconciles("jobs", 4);
  metrics.set_leader("qsync-operator-leader", true);
  auto observer = metrics.client_observer();
  observer("get", 200, 0.004);
  observer("get", 200, 0.006);
  observer("update", 409, 0.01);
  observer("watch", 0, 1.0);

  const auto answer = test::http_get("127.0.0.1", port, "/metrics");
  ASSERT_EQ(answer.status, 200);
  const auto samples = test::parse_metrics_text(answer.body);
  auto value = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
    const test::MetricSample* s = test::find_sample(samples, name, labels);
    EXPECT_NE(s, nullptr) << name << " missing from\n" << answer.body;
    return s ? s->value : -1;
  };
  EXPECT_EQ(value("controller_runtime_reconcile_total", {{"controller", "jobs"}, {"result", "success"}}), 2);
  EXPECT_EQ(value("controller_runtime_reconcile_total", {{"controller", "jobs"}, {"result", "requeue_after"}}), 1);
  EXPECT_EQ(value("controller_runtime_reconcile_errors_total", {{"controller", "jobs"}}), 1);
  EXPECT_EQ(value("controller_runtime_reconcile_time_seconds_count", {{"controller", "jobs"}}), 3);
  EXPECT_EQ(value("controller_runtime_active_workers", {{"controller", "jobs"}}), 2);
  EXPECT_EQ(value("controller_runtime_max_concurrent_reconciles", {{"controller", "jobs"}}), 4);
  EXPECT_EQ(value("leader_election_master_status", {{"name", "qsync-operator-leader"}}), 1);
  EXPECT_EQ(value("rest_client_requests_total", {{"verb", "get"}, {"code", "200"}}), 2);
  EXPECT_EQ(value("rest_client_requests_total", {{"verb", "update"}, {"code", "409"}}), 1);
  EXPECT_EQ(value("rest_client_requests_total", {{"verb", "watch"}, {"code", "<error>"}}), 1);
  EXPECT_EQ(value("rest_client_request_duration_seconds_count", {{"verb", "get"}}), 2);
}

TEST(OperatorMetrics, WorkQueueFeedsWorkqueueSeries) {
  OperatorMetrics metrics;
  {
    WorkQueue q("jobs", nullptr, metrics.work_queue_metrics("jobs"));
    q.add("ns/a");
    q.add("ns/b");
    q.add("ns/a");
    auto key = q.get();
    q.done(*key);
    q.add_rate_limited("ns/c");
  }
  const auto samples = test::parse_metrics_text(metrics.scrape());
  auto value = [&](const std::string& name) {
    const test::MetricSample* s = test::find_sample(samples, name, {{"name", "jobs"}});
    return s ? s->value : -1;
  };
  EXPECT_EQ(value("workqueue_adds_total"), 2);
  EXPECT_EQ(value("workqueue_depth"), 1);
  EXPECT_EQ(value("workqueue_retries_total"), 1);
  EXPECT_EQ(value("workqueue_queue_duration_seconds_count"), 1);
  EXPECT_EQ(value("workqueue_work_duration_seconds_count"), 1);
}

TEST(OperatorMetrics, ServeOnATakenPortNamesIt) {
  OperatorMetrics first;
  const int port = first.serve("127.0.0.1", 0);
  OperatorMetrics second;
  try {
    second.serve("127.0.0.1", port);
    FAIL() << "serving on a taken port succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync::controller
