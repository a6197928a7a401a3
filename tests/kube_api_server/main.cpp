// File: tests/kube_api_server/main.cpp
// qsync-kube-test-server: the Kubernetes API test server as a process, for kubectl and
// end-to-end tests. Prints its URL as the first line of stdout, optionally writes a kubeconfig,
// and serves until SIGINT or SIGTERM.
//   qsync-kube-test-server [--host 127.0.0.1] [--port 0] [--history 1000] [--kubelet]
//                          [--kubelet-log-dir DIR] [--kubelet-bin-dir DIR] [--kubelet-root-dir DIR]
//                          [--controllers] [--write-kubeconfig PATH]
// --kubelet-bin-dir: a Pod's /usr/local/bin/NAME runs DIR/NAME (e.g. build/bin);
// --kubelet-root-dir: where Pod volumes and persistentVolumeClaims live (see local_kubelet.h);
// --controllers: Deployments and StatefulSets run their Pods, GPU Pods are scheduled onto Nodes
// (workload_controllers.h, pod_scheduler.h).
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/kube_api_server/api_server.h"

namespace {

void usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--host H] [--port P] [--history N] [--kubelet] [--kubelet-log-dir DIR] [--kubelet-bin-dir DIR]\n"
               "       [--kubelet-root-dir DIR] [--controllers] [--write-kubeconfig PATH]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", kubeconfig;
  int port = 0;
  qsync::kube_test::ServerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "qsync-kube-test-server: " << arg << " needs a value\n";
        usage(argv[0]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--host") {
      host = value();
    } else if (arg == "--port") {
      port = std::atoi(value().c_str());
    } else if (arg == "--history") {
      options.history_limit = static_cast<size_t>(std::atol(value().c_str()));
    } else if (arg == "--kubelet") {
      options.local_kubelet = true;
    } else if (arg == "--controllers") {
      options.controllers = true;
    } else if (arg == "--kubelet-log-dir") {
      options.kubelet_log_dir = value();
    } else if (arg == "--kubelet-bin-dir") {
      options.kubelet_bin_dir = value();
    } else if (arg == "--kubelet-root-dir") {
      options.kubelet_root_dir = value();
    } else if (arg == "--write-kubeconfig") {
      kubeconfig = value();
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      return 0;
    } else {
      std::cerr << "qsync-kube-test-server: unknown argument " << arg << "\n";
      usage(argv[0]);
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // every thread inherits the mask; sigwait below
  try {
    qsync::kube_test::ApiServer server(options);
    server.start(host, port);
    std::cout << server.url() << std::endl;
    if (!kubeconfig.empty()) {
      server.write_kubeconfig(kubeconfig);
      std::cerr << "qsync-kube-test-server: wrote " << kubeconfig << "\n";
    }
    int sig = 0;
    sigwait(&signals, &sig);
    server.stop();
  } catch (const std::exception& e) {
    std::cerr << "qsync-kube-test-server: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
