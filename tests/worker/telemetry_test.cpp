// File: tests/worker/telemetry_test.cpp
// WorkerTelemetry (worker/telemetry.h): its /metrics page scraped over HTTP (names, constant
// labels, values after record_step / set_plan / set_memory), bind errors, and an integration test
// in which a real Prometheus server (tests/support/prometheus_server.h) scrapes two ranks and
// PromQL sees both.
#include "worker/telemetry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/metrics_text.h"
#include "tests/support/prometheus_server.h"

namespace qsync {
namespace {

using test::find_sample;
using test::find_samples;
using test::MetricSample;

std::vector<MetricSample> scrape(const WorkerTelemetry& t, std::string* body = nullptr) {
  const test::HttpResponse r = test::http_get("127.0.0.1", t.port(), "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  if (body != nullptr) *body = r.body;
  return test::parse_metrics_text(r.body);
}

double value_of(const std::vector<MetricSample>& samples, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
  const MetricSample* s = find_sample(samples, name, labels);
  if (s == nullptr) throw std::runtime_error("no sample " + name + " in the scrape");
  return s->value;
}

WorkerTelemetryConfig config(int rank, const std::string& device_class, const std::string& job = "unit-job") {
  WorkerTelemetryConfig c;
  c.port = 0;
  c.job = job;
  c.rank = rank;
  c.device_class = device_class;
  return c;
}

TEST(WorkerTelemetry, PicksAFreePortAndServesEveryMetric) {
  WorkerTelemetry t(config(0, "cpu-avx512"));
  ASSERT_GT(t.port(), 0);
  EXPECT_EQ(t.url(), "http://127.0.0.1:" + std::to_string(t.port()) + "/metrics");
  std::string body;
  const auto samples = scrape(t, &body);
  for (const char* name : {"qsync_worker_step_duration_seconds_count", "qsync_worker_compute_duration_seconds_count",
                           "qsync_worker_sync_wait_duration_seconds_count",
                           "qsync_worker_allreduce_duration_seconds_count", "qsync_worker_loss",
                           "qsync_worker_samples_total", "qsync_worker_steps_total", "qsync_worker_peak_memory_bytes",
                           "qsync_worker_memory_budget_bytes", "qsync_worker_predicted_step_seconds",
                           "qsync_worker_test_accuracy", "qsync_worker_local_batch"}) {
    EXPECT_NE(find_sample(samples, name), nullptr) << name << " missing from:\n" << body;
    EXPECT_EQ(value_of(samples, name), 0.0) << name;
  }
  EXPECT_NE(body.find("# TYPE qsync_worker_step_duration_seconds histogram"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE qsync_worker_samples_total counter"), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE qsync_worker_loss gauge"), std::string::npos) << body;
  EXPECT_EQ(find_sample(samples, "qsync_worker_layer_precision_info"), nullptr) << "no plan yet";
}

TEST(WorkerTelemetry, RecordsStepsPlanAndMemoryWithConstantLabels) {
  WorkerTelemetry t(config(3, "cpu-avx2"));
  t.set_plan({{"fc1", "int8"}, {"fc2", "fp16"}, {"head", "fp32"}}, 0.018, 32);
  t.record_step(0.020, 0.015, 0.003, 0.002, 1.5, 32);
  t.record_step(0.020, 0.015, 0.003, 0.002, 1.25, 32);
  t.set_memory(int64_t(1) << 20, int64_t(4) << 20);
  t.set_test_accuracy(0.75);
  const auto samples = scrape(t);

  ASSERT_FALSE(samples.empty());
  for (const MetricSample& s : samples) {
    if (s.name.rfind("qsync_worker_", 0) != 0) continue;
    EXPECT_EQ(s.labels.count("job") ? s.labels.at("job") : "", "unit-job") << s.name;
    EXPECT_EQ(s.labels.count("rank") ? s.labels.at("rank") : "", "3") << s.name;
    EXPECT_EQ(s.labels.count("device_class") ? s.labels.at("device_class") : "", "cpu-avx2") << s.name;
  }
  EXPECT_EQ(value_of(samples, "qsync_worker_steps_total"), 2);
  EXPECT_EQ(value_of(samples, "qsync_worker_samples_total"), 64);
  EXPECT_EQ(value_of(samples, "qsync_worker_loss"), 1.25);
  EXPECT_EQ(value_of(samples, "qsync_worker_step_duration_seconds_count"), 2);
  EXPECT_NEAR(value_of(samples, "qsync_worker_step_duration_seconds_sum"), 0.040, 1e-12);
  EXPECT_NEAR(value_of(samples, "qsync_worker_compute_duration_seconds_sum"), 0.030, 1e-12);
  EXPECT_NEAR(value_of(samples, "qsync_worker_sync_wait_duration_seconds_sum"), 0.006, 1e-12);
  EXPECT_NEAR(value_of(samples, "qsync_worker_allreduce_duration_seconds_sum"), 0.004, 1e-12);
  EXPECT_EQ(value_of(samples, "qsync_worker_allreduce_duration_seconds_count"), 2);

  // Buckets span 1 ms .. 10 s; 20 ms lands in le=0.025, not in le=0.01.
  const auto buckets = find_samples(samples, "qsync_worker_step_duration_seconds_bucket");
  std::vector<double> bounds;
  for (const MetricSample& b : buckets) bounds.push_back(std::stod(b.labels.at("le")));
  ASSERT_GE(bounds.size(), 8u);
  EXPECT_DOUBLE_EQ(bounds.front(), 0.001);
  EXPECT_DOUBLE_EQ(bounds[bounds.size() - 2], 10.0);
  EXPECT_EQ(buckets.back().labels.at("le"), "+Inf");
  for (const MetricSample& b : buckets) {
    const double le = std::stod(b.labels.at("le"));
    EXPECT_EQ(b.value, le < 0.02 ? 0 : 2) << "le=" << b.labels.at("le");
  }

  EXPECT_EQ(value_of(samples, "qsync_worker_peak_memory_bytes"), double(1 << 20));
  EXPECT_EQ(value_of(samples, "qsync_worker_memory_budget_bytes"), double(4 << 20));
  EXPECT_EQ(value_of(samples, "qsync_worker_test_accuracy"), 0.75);
  EXPECT_EQ(value_of(samples, "qsync_worker_predicted_step_seconds"), 0.018);
  EXPECT_EQ(value_of(samples, "qsync_worker_local_batch"), 32);
  const auto layers = find_samples(samples, "qsync_worker_layer_precision_info");
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(value_of(samples, "qsync_worker_layer_precision_info", {{"layer", "fc1"}, {"precision", "int8"}}), 1);
  EXPECT_EQ(value_of(samples, "qsync_worker_layer_precision_info", {{"layer", "fc2"}, {"precision", "fp16"}}), 1);
  EXPECT_EQ(value_of(samples, "qsync_worker_layer_precision_info", {{"layer", "head"}, {"precision", "fp32"}}), 1);
}

TEST(WorkerTelemetry, SetPlanReplacesTheEarlierPlan) {
  WorkerTelemetry t(config(0, "cpu-avx512"));
  t.set_plan({{"fc1", "int8"}, {"fc2", "int8"}}, 0.05, 64);
  t.set_plan({{"fc1", "fp16"}, {"fc1", "fp16"}}, 0, 48);  // a repeated layer yields one series
  const auto samples = scrape(t);
  const auto layers = find_samples(samples, "qsync_worker_layer_precision_info");
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].labels.at("layer"), "fc1");
  EXPECT_EQ(layers[0].labels.at("precision"), "fp16");
  EXPECT_EQ(value_of(samples, "qsync_worker_predicted_step_seconds"), 0);
  EXPECT_EQ(value_of(samples, "qsync_worker_local_batch"), 48);
  t.set_plan({}, 0, 48);
  EXPECT_TRUE(find_samples(scrape(t), "qsync_worker_layer_precision_info").empty());
}

TEST(WorkerTelemetry, PortInUseNamesThePortAndTheFlag) {
  WorkerTelemetry first(config(0, "cpu-avx512"));
  WorkerTelemetryConfig c = config(1, "cpu-avx2");
  c.port = first.port();
  try {
    WorkerTelemetry second(c);
    FAIL() << "binding port " << c.port << " twice should fail";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(c.port)), std::string::npos) << what;
    EXPECT_NE(what.find("in use"), std::string::npos) << what;
    EXPECT_NE(what.find("--metrics-port"), std::string::npos) << what;
  }
  // The first endpoint still serves.
  EXPECT_EQ(test::http_get("127.0.0.1", first.port(), "/metrics").status, 200);
}

TEST(WorkerTelemetry, PortOutsideRangeIsRejected) {
  WorkerTelemetryConfig c = config(0, "cpu-avx512");
  c.port = 70000;
  EXPECT_THROW(WorkerTelemetry t(c), std::invalid_argument);
}

TEST(WorkerTelemetry, NonIpv4AddressIsRejected) {
  WorkerTelemetryConfig c = config(0, "cpu-avx512");
  c.bind_address = "::1";
  EXPECT_THROW(WorkerTelemetry t(c), std::invalid_argument);
}

// --- Integration: a real Prometheus scrapes two ranks --------------------------------------------

std::set<std::string> ranks_of(const nlohmann::json& result) {
  std::set<std::string> ranks;
  for (const nlohmann::json& series : result) ranks.insert(series["metric"].value("rank", "?"));
  return ranks;
}

bool has_both_ranks(const nlohmann::json& result) { return ranks_of(result) == std::set<std::string>{"0", "1"}; }

TEST(WorkerTelemetryPrometheus, RealPrometheusScrapesTwoRanks) {
  if (!test::PrometheusServer::available()) GTEST_SKIP() << test::PrometheusServer::missing_message();
  WorkerTelemetry rank0(config(0, "cpu-avx512", "it-job"));
  WorkerTelemetry rank1(config(1, "cpu-avx2", "it-job"));
  rank0.set_plan({{"fc1", "int8"}, {"fc2", "fp16"}}, 0.010, 40);
  rank1.set_plan({{"fc1", "fp32"}, {"fc2", "int8"}}, 0.012, 24);
  std::atomic<bool> stop{false};
  std::thread steps([&] {
    for (int i = 0; !stop.load(); ++i) {
      rank0.record_step(0.010, 0.008, 0.001, 0.001, 2.0 / (1 + i), 40);
      rank1.record_step(0.012, 0.010, 0.001, 0.001, 2.0 / (1 + i), 24);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  struct Stop {
    std::atomic<bool>& flag;
    std::thread& thread;
    ~Stop() {
      flag.store(true);
      thread.join();
    }
  } stop_steps{stop, steps};

  test::PrometheusServerConfig pc;
  for (const WorkerTelemetry* t : {&rank0, &rank1})
    pc.targets.push_back({"127.0.0.1:" + std::to_string(t->port()), {{"cluster", "telemetry-test"}}});
  test::PrometheusServer prom(pc);
  const auto timeout = std::chrono::seconds(15);
  const auto ready = std::chrono::steady_clock::now();
  try {
    prom.query("rate(qsync_worker_samples_total[");
    ADD_FAILURE() << "a malformed query should throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_data"), std::string::npos) << e.what();
  }

  const nlohmann::json counts = prom.wait_until("qsync_worker_step_duration_seconds_count", timeout, has_both_ranks);
  for (const nlohmann::json& s : counts) {
    const nlohmann::json& m = s["metric"];
    EXPECT_EQ(m.value("job", ""), "it-job") << s.dump();  // honor_labels keeps the worker's job
    EXPECT_EQ(m.value("cluster", ""), "telemetry-test") << s.dump();
    EXPECT_EQ(m.value("device_class", ""), m.value("rank", "") == "0" ? "cpu-avx512" : "cpu-avx2") << s.dump();
    EXPECT_GT(std::stod(s["value"][1].get<std::string>()), 0) << s.dump();
  }
  EXPECT_TRUE(has_both_ranks(prom.wait_until("qsync_worker_loss", timeout, has_both_ranks)));
  const nlohmann::json rates =
      prom.wait_until("rate(qsync_worker_samples_total[10s])", timeout, [](const nlohmann::json& r) {
        if (!has_both_ranks(r)) return false;
        for (const nlohmann::json& s : r)
          if (std::stod(s["value"][1].get<std::string>()) <= 0) return false;
        return true;
      });
  EXPECT_EQ(rates.size(), 2u) << rates.dump();
  const nlohmann::json layers = prom.wait_until("qsync_worker_layer_precision_info", timeout,
                                                [](const nlohmann::json& r) { return r.size() == 4; });
  std::set<std::string> seen;
  for (const nlohmann::json& s : layers)
    seen.insert(s["metric"].value("rank", "") + ":" + s["metric"].value("layer", "") + "=" +
                s["metric"].value("precision", ""));
  EXPECT_EQ(seen, (std::set<std::string>{"0:fc1=int8", "0:fc2=fp16", "1:fc1=fp32", "1:fc2=int8"}));
  RecordProperty("seconds_to_all_series",
                 std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - ready).count()));
}

}  // namespace
}  // namespace qsync
