// File: tests/e2e/dashboard_prometheus_test.cpp
// The Grafana dashboard (charts/qsync/dashboards/qsync.json) against a real Prometheus: a live
// local `qsync run` of the zoo MLP (2 ranks, each serving /metrics via --metrics-base-port) and
// qsync-operator (leader election on, a job planned against the in-process API test server, so
// the operator's metrics exist) are scraped every second with honor_labels (the workers' own
// `job` label kept, as the chart's NOTES tell a real deployment). Then every panel target's
// expression, with the dashboard variables bound as Grafana binds them ($job: the run's job name,
// $rank: 0|1, any other variable and $__rate_interval-style built-ins: values that match), is
// evaluated as an instant query and must return data; the queries that return nothing are
// printed. The run is given more steps than the test needs and stopped with Ctrl-C (workers
// checkpoint and exit) once every query has answered, since a finished target's series go stale.
// Skipped when /usr/bin/prometheus is missing.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/process.h"
#include "tests/kube_api_server/api_server.h"
#include "tests/kube_api_server/yaml_json.h"
#include "tests/operator/cluster_objects.h"
#include "tests/support/prometheus_server.h"

#ifndef QSYNC_OPERATOR_BIN
#error "QSYNC_OPERATOR_BIN must name the qsync-operator binary"
#endif
#ifndef QSYNC_RUNNER_BIN
#error "QSYNC_RUNNER_BIN must name the qsync binary"
#endif
#ifndef QSYNC_SOURCE_DIR
#error "QSYNC_SOURCE_DIR must name the repository root (for crds/ and charts/)"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const char* const JOB = "dash-e2e";

struct PanelQuery {
  std::string panel, expr;
};

// Every target expression of every panel (rows' nested panels included).
std::vector<PanelQuery> dashboard_queries(const json& dashboard) {
  std::vector<PanelQuery> out;
  std::function<void(const json&)> visit = [&](const json& panels) {
    for (const json& p : panels) {
      if (p.contains("panels")) visit(p["panels"]);
      for (const json& t : p.value("targets", json::array())) {
        if (t.contains("expr") && !t["expr"].get<std::string>().empty()) out.push_back({p.value("title", "?"), t["expr"]});
      }
    }
  };
  visit(dashboard.at("panels"));
  return out;
}

// The expression as Grafana sends it: $var / ${var} / [[var]] replaced by `values` (regexes
// that match what the run exports; unknown variables: .*) and the interval built-ins by 1m.
std::string bind_variables(std::string expr, const std::map<std::string, std::string>& values) {
  static const std::regex builtin(R"(\$\{?__(rate_interval|interval|range)\}?)");
  expr = std::regex_replace(expr, builtin, "1m");
  static const std::regex variable(R"(\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\])");
  std::string out;
  auto begin = std::sregex_iterator(expr.begin(), expr.end(), variable);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    std::string name = m[1].matched ? m[1].str() : m[2].matched ? m[2].str() : m[3].str();
    out += expr.substr(last, size_t(m.position(0)) - last);
    auto found = values.find(name);
    out += found == values.end() ? ".*" : found->second;
    last = size_t(m.position(0) + m.length(0));
  }
  return out + expr.substr(last);
}

bool port_is_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

// P with P and P+1 both free (rank r serves P+r).
int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int p = test::free_tcp_port();
    if (p < 65535 && port_is_free(p + 1)) return p;
  }
  throw std::runtime_error("no two consecutive free TCP ports on 127.0.0.1");
}

// A GPU node whose pool label is its name.
json gpu_node(const std::string& name, const std::string& gpu_product) {
  return operator_test::ready_node(name, {{"qsync.dev/pool", name}, {"nvidia.com/gpu.product", gpu_product}});
}

json operator_job() {
  return operator_test::hybrid_training_job("dash-operator", operator_test::two_pool_job_spec("mlp", "a100", "t4"));
}

std::string local_job_yaml() {
  // Far more steps than needed: the run is stopped once every query has answered.
  return std::string("apiVersion: qsync.dev/v1alpha1\nkind: HybridTrainingJob\nmetadata: {name: ") + JOB +
         "}\n"
         "spec:\n"
         "  model: {zoo: mlp}\n"
         "  optimizer: {name: adamw, lr: 0.001}\n"
         "  steps: 5000\n"
         "  globalBatch: 32\n"
         "  seed: 1\n"
         "  evalLimit: 50\n"
         "  evalEvery: 20\n"
         "  planning: {allocator: uniform, precision: fp32}\n"
         "  pool:\n"
         "    local:\n"
         "      - {deviceClass: cpu-avx512, threads: 1, memoryBudget: 2Gi}\n"
         "      - {deviceClass: cpu-avx2, threads: 1, memoryBudget: 2Gi}\n";
}

TEST(DashboardPrometheus, EveryPanelQueryReturnsDataForALiveRun) {
  if (!test::PrometheusServer::available()) GTEST_SKIP() << test::PrometheusServer::missing_message();
  const json dashboard = json::parse(test::read_text(std::string(QSYNC_SOURCE_DIR) + "/charts/qsync/dashboards/qsync.json"));
  const std::vector<PanelQuery> queries = dashboard_queries(dashboard);
  ASSERT_FALSE(queries.empty()) << "the dashboard has no panel targets";
  test::TempDir dir;

  // The operator against the in-process API test server, with the CRD and two GPU nodes.
  kube_test::ApiServer api;
  api.start();
  api.put_object(kube_test::yaml_to_json(test::read_text(std::string(QSYNC_SOURCE_DIR) + "/crds/qsync.dev_hybridtrainingjobs.yaml")));
  api.put_object(gpu_node("a100", "NVIDIA-A100-SXM4-80GB"));
  api.put_object(gpu_node("t4", "Tesla-T4"));
  const int operator_metrics_port = test::free_tcp_port();
  test::SpawnOptions op;
  op.args = {QSYNC_OPERATOR_BIN, "--kubeconfig", api.write_kubeconfig(dir.file("kubeconfig")), "--leader-elect=true",
             "--leader-election-namespace", "default", "--metrics-port", std::to_string(operator_metrics_port),
             "--health-port", std::to_string(test::free_tcp_port()),
             "--gpu-ranks-on-cpu"};  // the test nodes' nvidia.com/gpu are stand-ins: GPU ranks run on CPUs
  op.stdout_path = dir.file("operator.out");
  op.stderr_path = dir.file("operator.err");
  test::Process operator_process(op);

  const int worker_base_port = free_port_pair();
  test::PrometheusServerConfig pc;  // scrape every second, honor_labels on
  for (int port : {worker_base_port, worker_base_port + 1, operator_metrics_port})
    pc.targets.push_back({"127.0.0.1:" + std::to_string(port), {}});
  test::PrometheusServer prom(pc);

  // The job after Prometheus has seen the operator, so planning and reconciles land in its
  // rate windows.
  prom.wait_for("up{instance=\"127.0.0.1:" + std::to_string(operator_metrics_port) + "\"} == 1", 30s);
  api.put_object(operator_job());

  test::SpawnOptions run;
  run.args = {QSYNC_RUNNER_BIN, "run", dir.write("job.yaml", local_job_yaml()), "--work-dir", dir.file("work"), "--quiet",
              "--metrics-base-port", std::to_string(worker_base_port), "--profile-rounds", "1"};
  run.stdout_path = dir.file("run.out");
  run.stderr_path = dir.file("run.err");
  test::Process runner(run);
  auto logs = [&] {
    return "\n--- qsync run ---\n" + runner.out() + runner.err() + "\n--- operator ---\n" + operator_process.err() +
           "\n--- targets ---\n" + prom.targets_health();
  };

  // Both ranks scraped a few times while training.
  // The run plans first (profiles of both ranks, the all-reduce, calibration), which on a loaded
  // 2-core CI machine can take most of a minute before any worker step.
  prom.wait_until(std::string("qsync_worker_steps_total{job=\"") + JOB + "\"} >= 5", 180s,
                  [](const json& r) { return r.size() == 2; });

  const std::map<std::string, std::string> values = {{"job", JOB}, {"rank", "0|1"}};
  std::vector<std::string> empty;
  // Every window has two or more samples within seconds (scrapes every second); a query still
  // empty 20 s on has no series to find.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (const PanelQuery& q : queries) {
    const std::string promql = bind_variables(q.expr, values);
    json result;
    // A rate needs two samples in its window: poll until it answers or the shared deadline passes.
    while (true) {
      result = prom.query(promql);
      if (!result.empty() || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(250ms);
    }
    if (result.empty()) empty.push_back("panel \"" + q.panel + "\": " + promql);
    else std::cout << "ok  " << q.panel << ": " << promql << " -> " << result.size() << " series\n";
  }
  ASSERT_TRUE(runner.running()) << "the run ended before every query was checked" << logs();
  runner.signal(SIGINT);  // the runner forwards Ctrl-C: workers checkpoint and exit
  const auto runner_exit = runner.wait_for(60s);
  operator_process.signal(SIGTERM);
  EXPECT_TRUE(operator_process.wait_for(30s).has_value()) << "qsync-operator did not stop on SIGTERM" << logs();

  std::string missing;
  for (const std::string& e : empty) missing += "  " + e + "\n";
  EXPECT_TRUE(empty.empty()) << empty.size() << " of " << queries.size()
                             << " dashboard queries returned no data from the live run:\n"
                             << missing << logs();
  EXPECT_TRUE(runner_exit.has_value()) << "qsync run did not stop after Ctrl-C" << logs();
}

}  // namespace
}  // namespace qsync
