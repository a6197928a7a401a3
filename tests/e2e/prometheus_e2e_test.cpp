// File: tests/e2e/prometheus_e2e_test.cpp
// End-to-end telemetry: two data-parallel qsync-worker processes (rank 0 fp32, rank 1 int8, each
// with --metrics-port on a free port) train the zoo MLP while a real Prometheus
// (tests/support/prometheus_server.h, scrape interval 1 s) scrapes both; PromQL over its HTTP
// API returns the step-duration histogram count, the loss and the per-layer plan for both ranks
// (rank="0" / rank="1", the worker's job and device class as labels). The ranks are given far
// more steps than the test needs and are stopped with SIGTERM (checkpoint-and-stop) once
// Prometheus has scraped them a few times, so the test takes seconds however fast the steps are.
// Skipped when /usr/bin/prometheus is missing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "tests/e2e/process.h"
#include "tests/support/prometheus_server.h"

#ifndef QSYNC_WORKER_BIN
#error "QSYNC_WORKER_BIN must name the qsync-worker binary"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
using test::Process;
using test::TempDir;

const char* const JOB = "e2e-prometheus";

std::set<std::string> ranks_of(const nlohmann::json& result) {
  std::set<std::string> ranks;
  for (const nlohmann::json& series : result) ranks.insert(series["metric"].value("rank", "?"));
  return ranks;
}

bool has_both_ranks(const nlohmann::json& result) {
  return result.size() == 2 && ranks_of(result) == std::set<std::string>{"0", "1"};
}

double value_of(const nlohmann::json& series) { return std::stod(series["value"][1].get<std::string>()); }

TEST(PrometheusE2e, ScrapesBothRanksOfALiveJob) {
  if (!test::PrometheusServer::available()) GTEST_SKIP() << test::PrometheusServer::missing_message();
  TempDir dir;
  const std::string classes[] = {device_class_fallback(device_class_by_name("cpu-avx512")).name,
                                 device_class_fallback(device_class_by_name("cpu-avx2")).name};
  const std::string precisions[] = {"fp32", "int8"};
  const int metrics_ports[] = {test::free_tcp_port(), test::free_tcp_port()};
  ASSERT_NE(metrics_ports[0], metrics_ports[1]);

  // Prometheus first (it takes a second or two to be ready); its targets are down until the
  // workers serve /metrics.
  test::PrometheusServerConfig pc;
  for (int port : metrics_ports) pc.targets.push_back({"127.0.0.1:" + std::to_string(port), {{"suite", "e2e"}}});
  test::PrometheusServer prom(pc);

  const int master_port = test::free_tcp_port();
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) {
    test::SpawnOptions o;
    o.args = {QSYNC_WORKER_BIN, "train", "--model", "mlp", "--steps", "3000", "--batch", "32", "--eval-limit", "50",
              "--threads", "1", "--quiet", "--collective-timeout", "20", "--job-name", JOB, "--device-class",
              classes[r], "--precision", precisions[r], "--metrics-port", std::to_string(metrics_ports[r]),
              "--summary-json", dir.file("rank" + std::to_string(r) + ".json")};
    o.env = test::rank_env(r, 2, master_port);
    o.stdout_path = dir.file("rank" + std::to_string(r) + ".out");
    o.stderr_path = dir.file("rank" + std::to_string(r) + ".err");
    ranks.emplace_back(o);
  }
  auto logs = [&] { return "rank 0:\n" + ranks[0].err() + "rank 1:\n" + ranks[1].err() + prom.targets_health(); };
  const auto t0 = std::chrono::steady_clock::now();
  const std::string selector = std::string("{job=\"") + JOB + "\"}";

  try {
    // Both ranks past their first step, seen by Prometheus.
    const nlohmann::json counts = prom.wait_until("qsync_worker_step_duration_seconds_count" + selector + " > 0", 30s,
                                                  has_both_ranks);
    for (const nlohmann::json& s : counts) {
      const nlohmann::json& m = s["metric"];
      const int r = std::stoi(m.value("rank", "-1"));
      ASSERT_TRUE(r == 0 || r == 1) << s.dump();
      EXPECT_EQ(m.value("device_class", ""), classes[r]) << s.dump();
      EXPECT_EQ(m.value("suite", ""), "e2e") << s.dump();
      EXPECT_EQ(m.value("instance", ""), "127.0.0.1:" + std::to_string(metrics_ports[r])) << s.dump();
    }
    // A few scrapes of each rank, with the step count rising between them.
    const nlohmann::json scrapes = prom.wait_until(
        "count_over_time(qsync_worker_step_duration_seconds_count" + selector + "[1m])", 30s,
        [](const nlohmann::json& r) {
          if (!has_both_ranks(r)) return false;
          for (const nlohmann::json& s : r)
            if (value_of(s) < 3) return false;
          return true;
        });
    EXPECT_TRUE(has_both_ranks(scrapes));
    const nlohmann::json rising = prom.query("increase(qsync_worker_steps_total" + selector + "[1m]) > 0");
    EXPECT_TRUE(has_both_ranks(rising)) << rising.dump();

    // The loss both ranks report: the global loss of the step, finite and positive.
    const nlohmann::json losses = prom.query("qsync_worker_loss" + selector);
    ASSERT_TRUE(has_both_ranks(losses)) << losses.dump();
    for (const nlohmann::json& s : losses) {
      const double loss = value_of(s);
      EXPECT_TRUE(std::isfinite(loss) && loss > 0 && loss < 10) << s.dump();
    }

    // Each rank's plan, as its precision-info series.
    const nlohmann::json layers = prom.query("qsync_worker_layer_precision_info" + selector);
    std::set<std::string> seen;
    for (const nlohmann::json& s : layers)
      seen.insert(s["metric"].value("rank", "") + ":" + s["metric"].value("layer", "") + "=" +
                  s["metric"].value("precision", ""));
    EXPECT_EQ(seen, (std::set<std::string>{"0:fc1=fp32", "0:fc2=fp32", "0:fc3=fp32", "1:fc1=int8", "1:fc2=int8",
                                           "1:fc3=int8"}));
  } catch (const std::exception& e) {
    FAIL() << e.what() << "\n" << logs();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("seconds_to_all_series", std::to_string(seconds));

  // Stop the job the way a scheduler does: SIGTERM makes every rank checkpoint-and-stop.
  for (Process& p : ranks) {
    ASSERT_TRUE(p.running()) << "a rank ended early:\n" << logs();
    p.signal(SIGTERM);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[size_t(r)].wait_for(30s).value_or(-1), 0) << logs();
    const nlohmann::json s =
        nlohmann::json::parse(test::read_text(dir.file("rank" + std::to_string(r) + ".json")), nullptr, false);
    ASSERT_TRUE(s.is_object()) << "rank " << r << " wrote no summary";
    EXPECT_EQ(s.value("stopped_early", false), true) << s.dump(2);
    EXPECT_LT(s.value("steps", int64_t(3000)), 3000);
  }
}

}  // namespace
}  // namespace qsync
