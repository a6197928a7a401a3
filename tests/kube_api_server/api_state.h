// File: tests/kube_api_server/api_state.h
// Everything the test API server's parts share: options, the lock that serializes every
// read and write, the condition variable watches wait on, the object store, the resource
// registry, faults, the request log and summary and the local kubelet's hooks. Internal to the server.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/faults.h"
#include "tests/kube_api_server/object_store.h"
#include "tests/kube_api_server/request_summary.h"
#include "tests/kube_api_server/resource_registry.h"
#include "tests/kube_api_server/server_options.h"

namespace qsync::kube_test {

struct ApiState {
  explicit ApiState(const ServerOptions& o)
      : options(o), store(o.history_limit), request_log(o.request_log_size),
        bookmark_interval_ms(o.bookmark_interval.count()) {}

  ServerOptions options;
  std::mutex mu;                    // guards store, registry, watch_epoch, gc_running
  std::condition_variable changed;  // notified after every write and on close_watches
  ObjectStore store;
  ResourceRegistry registry;
  uint64_t watch_epoch = 0;         // close_watches() bumps it: open watches end
  bool gc_running = false;
  bool controllers_running = false;  // workload_controllers.h: re-entry guard
  Faults faults;
  RequestLog request_log;
  RequestSummary request_summary;  // every resource request, by (verb, group, resource)
  std::atomic<int64_t> bookmark_interval_ms;
  std::string server_address = "127.0.0.1:0";  // host:port, for /api

  // Local kubelet hooks (unset when off). Called with `mu` held, so they only queue work.
  std::function<void(const nlohmann::json& pod)> pod_added;
  std::function<void(const nlohmann::json& pod)> pod_removed;
  // Graceful deletion (deletion.h): true when the kubelet runs the Pod and will stop it within
  // the grace period, then finish its deletion (finish_pod_termination); false: remove it now.
  std::function<bool(const nlohmann::json& pod, int64_t grace_seconds)> pod_terminating;
};

}  // namespace qsync::kube_test
