// File: tests/kube_api_server/server_options.h
// Settings of the Kubernetes API test server, shared by the server and its parts.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace qsync::kube_test {

struct ServerOptions {
  size_t history_limit = 1000;  // watch events kept; older resourceVersions answer 410 Gone
  std::chrono::milliseconds bookmark_interval{1000};  // BOOKMARK cadence on watches that allow them
  bool local_kubelet = false;   // run Pods whose command is an absolute path as local processes
  std::string kubelet_log_dir;  // where their stdout/stderr go (default: a temp directory)
  std::string kubelet_bin_dir;  // /usr/local/bin/NAME runs DIR/NAME when it exists ("": as itself)
  std::string kubelet_root_dir; // Pod volumes and persistentVolumeClaim directories ("": LOG_DIR/volumes)
  size_t request_log_size = 50; // exchanges kept for failure reports
  // Run the apps/v1 controllers (Deployments and StatefulSets create and delete their Pods and
  // keep their status) and the GPU scheduler (pod_scheduler.h) after every write.
  bool controllers = false;
};

}  // namespace qsync::kube_test
