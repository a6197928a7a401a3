// File: tests/e2e/kube_cluster.h
// A local "cluster" for end-to-end operator tests: qsync-kube-test-server with its local kubelet
// (Pods run as processes, /usr/local/bin mapped to the build's bin dir, volumes under the test's
// directory) as a child process, a kubeconfig for it, kubectl runs against it, and
// qsync-operator started and stopped as a child process. Everything lives in a TempDir, so a
// failed test's logs can be kept (QSYNC_KEEP_TEST_DIRS).
//
//   LocalKubeCluster cluster(dir, {server_bin, operator_bin, bin_dir});
//   ASSERT_EQ(cluster.kubectl({"apply", "-f", "crds/"}).code, 0);
//   cluster.start_operator(free_tcp_port());
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace qsync::test {

// kubectl on $PATH (or $KUBECTL), "" when there is none.
std::string find_kubectl();

struct KubeClusterOptions {
  std::string server_bin;    // qsync-kube-test-server
  std::string operator_bin;  // qsync-operator
  std::string bin_dir;       // what /usr/local/bin is for the kubelet (qsync-worker lives here)
  std::string kubectl;       // find_kubectl()
  // qsync-kube-test-server --controllers: Deployments/StatefulSets run their Pods, GPU Pods are
  // scheduled onto Nodes by free nvidia.com/gpu.
  bool controllers = false;
  // The server's and the operator's SIGALRM limit (process.h); longer tests raise it.
  unsigned alarm_seconds = 120;
};

struct KubectlResult {
  int code = -1;  // exit code; -1 when it did not finish in time
  std::string out, err;
};

class LocalKubeCluster {
 public:
  // Starts the server and waits for its kubeconfig. Throws std::runtime_error when it won't start.
  LocalKubeCluster(const TempDir& dir, KubeClusterOptions options);
  ~LocalKubeCluster();  // stops the operator, then the server (which kills the Pods)

  const std::string& kubeconfig() const { return kubeconfig_; }
  const std::string& kubelet_root() const { return kubelet_root_; }
  // The server's port on 127.0.0.1 (what it printed first), for direct GETs.
  int server_port() const;

  // kubectl --kubeconfig K ARGS, at most `timeout`.
  KubectlResult kubectl(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(30));
  // The text of `kubectl get ARGS -o jsonpath=PATH` ("" on failure).
  std::string jsonpath(const std::vector<std::string>& what, const std::string& path);

  // qsync-operator --kubeconfig K --leader-elect=false --master-port P --gpu-ranks-on-cpu (the
  // nodes' GPUs are stand-ins), free metrics/health ports, then `extra_args`.
  void start_operator(int master_port, const std::vector<std::string>& extra_args = {});
  // The operator's metrics port (the same over restarts: one scrape target), chosen now if it
  // was not yet, e.g. to give Prometheus the target before the operator starts.
  int reserve_operator_metrics_port();
  // SIGTERM and wait (SIGKILL after 15 s); returns its exit code.
  std::optional<int> stop_operator();
  // SIGKILL (a crash: nothing in flight is finished or cleaned up) and wait; returns its exit code.
  std::optional<int> kill_operator();
  bool operator_running();

  std::string operator_log() const;  // every operator run's stderr+stdout, in order
  std::string server_log() const;
  std::string pod_log(const std::string& ns, const std::string& name) const;  // the kubelet's log file
  std::string recent_requests();  // the server's last exchanges (kubectl get --raw /_test/requests)
  // Everything a failure report needs: requests, operator and server logs.
  std::string failure_report();

 private:
  const TempDir& dir_;
  KubeClusterOptions options_;
  std::string kubeconfig_, kubelet_root_, kubelet_logs_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Process> operator_;
  int operator_runs_ = 0;
  int operator_metrics_port_ = 0;
  int kubectl_runs_ = 0;
};

}  // namespace qsync::test
