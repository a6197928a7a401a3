// File: operator/controller/operator_metrics.h
// The operator's Prometheus metrics under controller-runtime's names, in one prometheus-cpp
// registry, served on /metrics by an Exposer when serve() is called:
//   controller_runtime_reconcile_total{controller,result=success|error|requeue|requeue_after}
//   controller_runtime_reconcile_errors_total{controller}
//   controller_runtime_terminal_reconcile_errors_total{controller}
//   controller_runtime_reconcile_panics_total{controller}
//   controller_runtime_reconcile_time_seconds{controller}      (histogram)
//   controller_runtime_active_workers{controller}, controller_runtime_max_concurrent_reconciles{controller}
//   workqueue_depth{name}, workqueue_adds_total{name}, workqueue_retries_total{name},
//   workqueue_queue_duration_seconds{name}, workqueue_work_duration_seconds{name} (histograms)
//   leader_election_master_status{name}
//   rest_client_requests_total{verb,code}, rest_client_request_duration_seconds{verb} (histogram)
// The API client feeds the rest_client_* series through client_observer() (ClientOptions::observer).
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "operator/controller/work_queue.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace qsync::controller {

class OperatorMetrics {
 public:
  OperatorMetrics();
  ~OperatorMetrics();
  OperatorMetrics(const OperatorMetrics&) = delete;
  OperatorMetrics& operator=(const OperatorMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Serves /metrics on bind_address:port (port 0: any free port); returns the port bound. Throws
  // std::runtime_error naming the address when it cannot bind (change --metrics-bind-address).
  int serve(const std::string& bind_address, int port);
  int port() const { return port_; }
  // The registry in the text exposition format (what /metrics answers).
  std::string scrape() const;

  // result: "success", "error", "requeue" or "requeue_after".
  void reconcile_finished(const std::string& controller, const std::string& result, double seconds);
  void reconcile_error(const std::string& controller);
  void terminal_reconcile_error(const std::string& controller);
  void reconcile_panic(const std::string& controller);
  void set_active_workers(const std::string& controller, int workers);
  void set_max_concurrent_reconciles(const std::string& controller, int workers);  // also creates its counters at 0
  void set_leader(const std::string& lease_name, bool leading);
  // verb as the client names it; code 0: transport failure.
  void api_request(const std::string& verb, int code, double seconds);
  // For kube::ClientOptions::observer.
  std::function<void(const std::string&, int, double)> client_observer();
  // The workqueue_*{name} series of one queue.
  std::shared_ptr<WorkQueueMetrics> work_queue_metrics(const std::string& queue_name);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;

  prometheus::Family<prometheus::Counter>* reconcile_total_;
  prometheus::Family<prometheus::Counter>* reconcile_errors_;
  prometheus::Family<prometheus::Counter>* terminal_errors_;
  prometheus::Family<prometheus::Counter>* panics_;
  prometheus::Family<prometheus::Histogram>* reconcile_time_;
  prometheus::Family<prometheus::Gauge>* active_workers_;
  prometheus::Family<prometheus::Gauge>* max_concurrent_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Counter>* queue_adds_;
  prometheus::Family<prometheus::Counter>* queue_retries_;
  prometheus::Family<prometheus::Histogram>* queue_duration_;
  prometheus::Family<prometheus::Histogram>* work_duration_;
  prometheus::Family<prometheus::Gauge>* leader_status_;
  prometheus::Family<prometheus::Counter>* requests_total_;
  prometheus::Family<prometheus::Histogram>* request_duration_;
};

}  // namespace qsync::controller
