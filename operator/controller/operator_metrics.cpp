// File: operator/controller/operator_metrics.cpp
// controller-runtime's metric families on prometheus-cpp, and the /metrics Exposer.
#include "operator/controller/operator_metrics.h"

#include <stdexcept>

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace qsync::controller {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// controller-runtime's reconcile_time buckets (seconds).
const prometheus::Histogram::BucketBoundaries kReconcileBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25,
                                                                   0.3,   0.35, 0.4,   0.45, 0.5, 0.6,  0.7, 0.8,
                                                                   0.9,   1.0,  1.25,  1.5,  1.75, 2.0, 2.5, 3.0,
                                                                   3.5,   4.0,  4.5,   5,   6,   7,   8,   9,
                                                                   10,    15,   20,    25,  30,  40,  50,  60};
// client-go's workqueue buckets: 10 ns .. 10 s, ten per decade step.
const prometheus::Histogram::BucketBoundaries kQueueBuckets = {1e-8, 1e-7, 1e-6, 1e-5, 1e-4,
                                                               1e-3, 1e-2, 1e-1, 1,    10};
const prometheus::Histogram::BucketBoundaries kRequestBuckets = {0.005, 0.025, 0.1, 0.25, 0.5, 1,
                                                                 2,     4,     8,   15,   30, 60};

class PrometheusWorkQueueMetrics : public WorkQueueMetrics {
 public:
  PrometheusWorkQueueMetrics(prometheus::Counter& adds, prometheus::Gauge& depth, prometheus::Counter& retries,
                             prometheus::Histogram& queue_duration, prometheus::Histogram& work_duration)
      : adds_(adds), depth_(depth), retries_(retries), queue_duration_(queue_duration), work_duration_(work_duration) {}
  void added() override { adds_.Increment(); }
  void depth_changed(int64_t depth) override { depth_.Set(static_cast<double>(depth)); }
  void retried() override { retries_.Increment(); }
  void queued_for(double seconds) override { queue_duration_.Observe(seconds); }
  void worked_for(double seconds) override { work_duration_.Observe(seconds); }

 private:
  prometheus::Counter& adds_;
  prometheus::Gauge& depth_;
  prometheus::Counter& retries_;
  prometheus::Histogram& queue_duration_;
  prometheus::Histogram& work_duration_;
};

}  // namespace

OperatorMetrics::OperatorMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  reconcile_total_ = &BuildCounter().Name("controller_runtime_reconcile_total")
                          .Help("Total number of reconciliations per controller").Register(r);
  reconcile_errors_ = &BuildCounter().Name("controller_runtime_reconcile_errors_total")
                           .Help("Total number of reconciliation errors per controller").Register(r);
  terminal_errors_ = &BuildCounter().Name("controller_runtime_terminal_reconcile_errors_total")
                          .Help("Total number of terminal reconciliation errors per controller").Register(r);
  panics_ = &BuildCounter().Name("controller_runtime_reconcile_panics_total")
                 .Help("Total number of reconciliation panics (non-standard exceptions) per controller").Register(r);
  reconcile_time_ = &BuildHistogram().Name("controller_runtime_reconcile_time_seconds")
                         .Help("Length of time per reconciliation per controller").Register(r);
  active_workers_ = &BuildGauge().Name("controller_runtime_active_workers")
                         .Help("Number of currently used workers per controller").Register(r);
  max_concurrent_ = &BuildGauge().Name("controller_runtime_max_concurrent_reconciles")
                         .Help("Maximum number of concurrent reconciles per controller").Register(r);
  queue_depth_ = &BuildGauge().Name("workqueue_depth").Help("Current depth of workqueue").Register(r);
  queue_adds_ = &BuildCounter().Name("workqueue_adds_total").Help("Total number of adds handled by workqueue").Register(r);
  queue_retries_ = &BuildCounter().Name("workqueue_retries_total")
                        .Help("Total number of retries handled by workqueue").Register(r);
  queue_duration_ = &BuildHistogram().Name("workqueue_queue_duration_seconds")
                         .Help("How long in seconds an item stays in workqueue before being requested").Register(r);
  work_duration_ = &BuildHistogram().Name("workqueue_work_duration_seconds")
                        .Help("How long in seconds processing an item from workqueue takes").Register(r);
  leader_status_ = &BuildGauge().Name("leader_election_master_status")
                        .Help("Gauge of if the reporting system is master of the relevant lease, 0 indicates "
                              "backup, 1 indicates master. 'name' is the string used to identify the lease")
                        .Register(r);
  requests_total_ = &BuildCounter().Name("rest_client_requests_total")
                         .Help("Number of HTTP requests, partitioned by verb and status code").Register(r);
  request_duration_ = &BuildHistogram().Name("rest_client_request_duration_seconds")
                           .Help("Request latency in seconds, broken down by verb").Register(r);
}

OperatorMetrics::~OperatorMetrics() = default;

int OperatorMetrics::serve(const std::string& bind_address, int port) {
  const std::string listen = bind_address + ":" + std::to_string(port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on " + listen + " (" + e.what() +
                             "): choose another --metrics-bind-address or port");
  }
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? port : ports.front();
  return port_;
}

std::string OperatorMetrics::scrape() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void OperatorMetrics::reconcile_finished(const std::string& controller, const std::string& result, double seconds) {
  reconcile_total_->Add({{"controller", controller}, {"result", result}}).Increment();
  reconcile_time_->Add({{"controller", controller}}, kReconcileBuckets).Observe(seconds);
}

void OperatorMetrics::reconcile_error(const std::string& controller) {
  reconcile_errors_->Add({{"controller", controller}}).Increment();
}

void OperatorMetrics::terminal_reconcile_error(const std::string& controller) {
  terminal_errors_->Add({{"controller", controller}}).Increment();
}

void OperatorMetrics::reconcile_panic(const std::string& controller) {
  panics_->Add({{"controller", controller}}).Increment();
}

void OperatorMetrics::set_active_workers(const std::string& controller, int workers) {
  active_workers_->Add({{"controller", controller}}).Set(workers);
}

void OperatorMetrics::set_max_concurrent_reconciles(const std::string& controller, int workers) {
  max_concurrent_->Add({{"controller", controller}}).Set(workers);
  // A controller's counters exist from its registration, at 0, as controller-runtime's do: a
  // rate() over them is 0 rather than empty before the first error.
  for (const char* result : {"success", "error", "requeue", "requeue_after"})
    reconcile_total_->Add({{"controller", controller}, {"result", result}});
  reconcile_errors_->Add({{"controller", controller}});
  terminal_errors_->Add({{"controller", controller}});
  panics_->Add({{"controller", controller}});
}

void OperatorMetrics::set_leader(const std::string& lease_name, bool leading) {
  leader_status_->Add({{"name", lease_name}}).Set(leading ? 1 : 0);
}

void OperatorMetrics::api_request(const std::string& verb, int code, double seconds) {
  requests_total_->Add({{"verb", verb}, {"code", code == 0 ? std::string("<error>") : std::to_string(code)}})
      .Increment();
  request_duration_->Add({{"verb", verb}}, kRequestBuckets).Observe(seconds);
}

std::function<void(const std::string&, int, double)> OperatorMetrics::client_observer() {
  return [this](const std::string& verb, int code, double seconds) { api_request(verb, code, seconds); };
}

std::shared_ptr<WorkQueueMetrics> OperatorMetrics::work_queue_metrics(const std::string& queue_name) {
  const prometheus::Labels labels = {{"name", queue_name}};
  return std::make_shared<PrometheusWorkQueueMetrics>(queue_adds_->Add(labels), queue_depth_->Add(labels),
                                                      queue_retries_->Add(labels),
                                                      queue_duration_->Add(labels, kQueueBuckets),
                                                      work_duration_->Add(labels, kQueueBuckets));
}

}  // namespace qsync::controller
