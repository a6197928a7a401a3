// File: tests/e2e/kube_cluster.cpp
// The local cluster of operator end-to-end tests (see kube_cluster.h): the API test server and
// qsync-operator as child processes, kubectl runs with their output in files.
#include "tests/e2e/kube_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace qsync::test {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string find_kubectl() {
  if (const char* env = std::getenv("KUBECTL"); env != nullptr && ::access(env, X_OK) == 0) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/kubectl";
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

LocalKubeCluster::LocalKubeCluster(const TempDir& dir, KubeClusterOptions options)
    : dir_(dir), options_(std::move(options)) {
  kubeconfig_ = dir_.file("kubeconfig");
  kubelet_root_ = dir_.file("kubelet");
  kubelet_logs_ = dir_.file("pod-logs");
  SpawnOptions spawn;
  spawn.args = {options_.server_bin,   "--kubelet",         "--kubelet-bin-dir", options_.bin_dir,
                "--kubelet-root-dir",  kubelet_root_,       "--kubelet-log-dir", kubelet_logs_,
                "--write-kubeconfig",  kubeconfig_};
  if (options_.controllers) spawn.args.push_back("--controllers");
  spawn.stdout_path = dir_.file("server.out");
  spawn.stderr_path = dir_.file("server.err");
  spawn.alarm_seconds = options_.alarm_seconds;
  server_ = std::make_unique<Process>(spawn);
  if (!poll_until([&] { return fs::exists(kubeconfig_) || !server_->running(); }, 20s) || !fs::exists(kubeconfig_))
    throw std::runtime_error("qsync-kube-test-server did not write its kubeconfig: " + server_log());
}

LocalKubeCluster::~LocalKubeCluster() {
  stop_operator();
  if (server_ && server_->running()) {
    server_->signal(SIGTERM);  // the server stops its kubelet, which kills every Pod's process group
    if (!server_->wait_for(20s)) server_->signal(SIGKILL);
    server_->wait_for(5s);
  }
}

KubectlResult LocalKubeCluster::kubectl(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  const int n = kubectl_runs_++;
  SpawnOptions spawn;
  spawn.args = {options_.kubectl, "--kubeconfig", kubeconfig_, "--cache-dir", dir_.file("kube-cache")};
  spawn.args.insert(spawn.args.end(), args.begin(), args.end());
  spawn.stdout_path = dir_.file("kubectl-" + std::to_string(n) + ".out");
  spawn.stderr_path = dir_.file("kubectl-" + std::to_string(n) + ".err");
  Process p(spawn);
  KubectlResult r;
  if (std::optional<int> code = p.wait_for(timeout)) r.code = *code;
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::string LocalKubeCluster::jsonpath(const std::vector<std::string>& what, const std::string& path) {
  std::vector<std::string> args = {"get"};
  args.insert(args.end(), what.begin(), what.end());
  args.push_back("-o=jsonpath=" + path);
  KubectlResult r = kubectl(args);
  return r.code == 0 ? r.out : "";
}

int LocalKubeCluster::reserve_operator_metrics_port() {
  if (operator_metrics_port_ == 0) operator_metrics_port_ = free_tcp_port();
  return operator_metrics_port_;
}

int LocalKubeCluster::server_port() const {
  const std::string out = read_text(dir_.file("server.out"));
  const size_t colon = out.rfind(':', out.find('\n'));
  return colon == std::string::npos ? 0 : std::atoi(out.c_str() + colon + 1);
}

void LocalKubeCluster::start_operator(int master_port, const std::vector<std::string>& extra_args) {
  if (operator_running()) throw std::runtime_error("start_operator: qsync-operator is already running");
  const int n = operator_runs_++;
  reserve_operator_metrics_port();
  SpawnOptions spawn;
  spawn.args = {options_.operator_bin,
                "--kubeconfig", kubeconfig_,
                "--leader-elect=false",
                "--metrics-port", std::to_string(operator_metrics_port_),
                "--health-port", std::to_string(free_tcp_port()),
                "--master-port", std::to_string(master_port),
                "--gpu-ranks-on-cpu"};  // the test nodes' nvidia.com/gpu are stand-ins: GPU ranks run on CPUs
  spawn.args.insert(spawn.args.end(), extra_args.begin(), extra_args.end());
  spawn.alarm_seconds = options_.alarm_seconds;
  spawn.stdout_path = dir_.file("operator-" + std::to_string(n) + ".out");
  spawn.stderr_path = dir_.file("operator-" + std::to_string(n) + ".err");
  operator_ = std::make_unique<Process>(spawn);
}

bool LocalKubeCluster::operator_running() { return operator_ && operator_->running(); }

std::optional<int> LocalKubeCluster::stop_operator() {
  if (!operator_) return std::nullopt;
  if (operator_->running()) {
    operator_->signal(SIGTERM);
    if (!operator_->wait_for(15s)) operator_->signal(SIGKILL);
  }
  std::optional<int> code = operator_->wait_for(5s);
  return code;
}

std::optional<int> LocalKubeCluster::kill_operator() {
  if (!operator_) return std::nullopt;
  if (operator_->running()) operator_->signal(SIGKILL);
  return operator_->wait_for(5s);
}

std::string LocalKubeCluster::operator_log() const {
  std::string log;
  for (int n = 0; n < operator_runs_; ++n) {
    log += "--- qsync-operator run " + std::to_string(n + 1) + "\n";
    log += read_text(dir_.file("operator-" + std::to_string(n) + ".err"));
    log += read_text(dir_.file("operator-" + std::to_string(n) + ".out"));
  }
  return log;
}

std::string LocalKubeCluster::server_log() const {
  return read_text(dir_.file("server.err")) + read_text(dir_.file("server.out"));
}

std::string LocalKubeCluster::pod_log(const std::string& ns, const std::string& name) const {
  return read_text(kubelet_logs_ + "/" + ns + "_" + name + ".log");
}

std::string LocalKubeCluster::recent_requests() {
  KubectlResult r = kubectl({"get", "--raw", "/_test/requests"}, 10s);
  return r.code == 0 ? r.out : "(kubectl get --raw /_test/requests failed: " + r.err + ")";
}

std::string LocalKubeCluster::failure_report() {
  std::string report = "=== the API test server's recent requests\n" + recent_requests();
  report += "\n=== qsync-operator's log (tail)\n";
  const std::string log = operator_log();
  report += log.size() > 20000 ? log.substr(log.size() - 20000) : log;
  report += "\n=== qsync-kube-test-server's log\n" + server_log();
  return report;
}

}  // namespace qsync::test
