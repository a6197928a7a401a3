// File: tests/support/prometheus_server.h
// A real Prometheus server (the Debian `prometheus` package, /usr/bin/prometheus) for integration
// tests: started on a free loopback port with a generated config that scrapes the given targets
// every second, storage in a temporary directory, stopped (SIGTERM, then waited for) on
// destruction.
//
//   if (!PrometheusServer::available()) GTEST_SKIP() << PrometheusServer::missing_message();
//   PrometheusServer prom({.targets = {{"127.0.0.1:" + std::to_string(port), {{"env", "test"}}}}});
//   nlohmann::json series = prom.wait_for("qsync_worker_loss", std::chrono::seconds(15));
//   series[0]["metric"]["rank"], series[0]["value"][1]  // instant vector: labels, "value"
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::test {

struct PrometheusTarget {
  std::string address;                        // host:port serving /metrics
  std::map<std::string, std::string> labels;  // extra target labels added to every series
};

struct PrometheusServerConfig {
  std::vector<PrometheusTarget> targets;
  // File-based service discovery: JSON files of [{"targets": ["host:port"], "labels": {...}}],
  // re-read when they change (for targets that come and go, e.g. a Deployment's pods).
  std::vector<std::string> file_sd_files;
  std::string job_name = "qsync-test";  // the scrape job
  std::string scrape_interval = "1s";
  // Keep the scraped job label (qsync workers export job=<training job>) instead of renaming it
  // to exported_job.
  bool honor_labels = true;
  std::chrono::milliseconds ready_timeout = std::chrono::seconds(30);
};

class PrometheusServer {
 public:
  static constexpr const char* BINARY = "/usr/bin/prometheus";
  // Whether BINARY exists and is executable.
  static bool available();
  // What to do when it is not (for GTEST_SKIP).
  static std::string missing_message();

  // Starts the server and waits for /-/ready. Throws std::runtime_error (with the server's log
  // tail) when it exits early or is not ready within ready_timeout.
  explicit PrometheusServer(const PrometheusServerConfig& config);
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Evaluates an instant PromQL query (GET /api/v1/query) and returns data.result: an array of
  // {"metric": {labels}, "value": [time, "value"]} for vectors. Throws std::runtime_error with
  // Prometheus' error for a bad query.
  nlohmann::json query(const std::string& promql) const;
  // Polls query() every 250 ms until the result is non-empty and returns it; throws
  // std::runtime_error naming the query, the timeout and the targets' health when it stays empty.
  nlohmann::json wait_for(const std::string& promql, std::chrono::milliseconds timeout) const;
  // Polls until `predicate(result)` holds (e.g. one series per rank); same errors as wait_for.
  template <class Predicate>
  nlohmann::json wait_until(const std::string& promql, std::chrono::milliseconds timeout,
                            Predicate predicate) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      nlohmann::json r = query(promql);
      if (predicate(r)) return r;
      if (std::chrono::steady_clock::now() >= deadline) throw_timeout(promql, timeout, r);
      poll_sleep();
    }
  }

  // The scrape targets' state from /api/v1/targets ("127.0.0.1:1234 up; ..."), for messages.
  std::string targets_health() const;
  // The last lines of the server's log.
  std::string log_tail(size_t max_bytes = 4000) const;

 private:
  [[noreturn]] void throw_timeout(const std::string& promql, std::chrono::milliseconds timeout,
                                  const nlohmann::json& last) const;
  static void poll_sleep();
  bool start(const PrometheusServerConfig& config);  // false: exited early (e.g. port taken)
  void stop();

  std::filesystem::path dir_;  // config, storage and log
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace qsync::test
