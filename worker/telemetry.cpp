// File: worker/telemetry.cpp
// WorkerTelemetry on prometheus-cpp: one registry per worker, served by a civetweb-based Exposer.
// A bind failure is probed again with a plain socket so the error can say why (port in use,
// address not local, ...) and what to change. Debian's civetweb has no IPv6: IPv4 addresses only.
#include "worker/telemetry.h"

#include "kernels/thread_stack_allowance.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <stdexcept>

namespace qsync {
namespace {

// 1 ms .. 10 s in 1-2.5-5 steps: a tiny MLP step on a fast CPU up to a large model on a slow one.
const prometheus::Histogram::BucketBoundaries& duration_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
  return buckets;
}

std::string listen_spec(const std::string& address, int port) { return address + ":" + std::to_string(port); }

// Why binding address:port failed and what to change, from a plain socket (civetweb only says
// that it failed).
std::string probe_bind_failure(const std::string& address, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::string("socket() failed: ") + std::strerror(errno);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int error = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ? errno : 0;
  ::close(fd);
  const std::string reason = error != 0 ? std::strerror(error) : "";
  if (error == EADDRINUSE)
    return "the port is already in use; choose another port with --metrics-port N (0 picks a free port)";
  if (!reason.empty()) return reason + "; check the metrics address (TrainConfig::metrics_address)";
  return "civetweb could not listen there; try another port with --metrics-port N (0 picks a free port)";
}

}  // namespace

WorkerTelemetry::WorkerTelemetry(const WorkerTelemetryConfig& config)
    : bind_address_(config.bind_address), registry_(std::make_shared<prometheus::Registry>()) {
  thread_stack_allowance_link();  // civetweb's small thread stacks beside CUDA's static TLS
  if (config.port < 0 || config.port > 65535) {
    throw std::invalid_argument("metrics port " + std::to_string(config.port) +
                                " is outside 0..65535; pass --metrics-port N (0 picks a free port)");
  }
  in_addr ignored{};
  if (::inet_pton(AF_INET, config.bind_address.c_str(), &ignored) != 1) {
    throw std::invalid_argument("metrics address '" + config.bind_address +
                                "' is not an IPv4 address (the metrics server listens on IPv4 only): use "
                                "e.g. 127.0.0.1, or 0.0.0.0 for every interface");
  }
  const prometheus::Labels constant = {{"job", config.job},
                                       {"rank", std::to_string(config.rank)},
                                       {"device_class", config.device_class}};
  auto histogram = [&](const std::string& name, const std::string& help) {
    auto& family = prometheus::BuildHistogram().Name(name).Help(help).Labels(constant).Register(*registry_);
    return &family.Add({}, duration_buckets());
  };
  auto gauge = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Labels(constant).Register(*registry_).Add({});
  };
  auto counter = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(constant).Register(*registry_).Add({});
  };

  step_duration_ = histogram("qsync_worker_step_duration_seconds",
                             "Wall time of one training step (compute, sync wait and all-reduce).");
  compute_duration_ = histogram("qsync_worker_compute_duration_seconds",
                                "Forward and backward compute time of one training step.");
  sync_wait_duration_ = histogram("qsync_worker_sync_wait_duration_seconds",
                                  "Time one step waited at the gradient sync for the slowest rank.");
  allreduce_duration_ = histogram("qsync_worker_allreduce_duration_seconds",
                                  "Time of the gradient all-reduce of one training step.");
  loss_ = gauge("qsync_worker_loss", "Training loss of the last step.");
  samples_ = counter("qsync_worker_samples_total", "Training samples processed by this rank.");
  steps_ = counter("qsync_worker_steps_total", "Training steps completed by this rank.");
  peak_memory_ = gauge("qsync_worker_peak_memory_bytes", "Peak training memory of this rank.");
  memory_budget_ = gauge("qsync_worker_memory_budget_bytes", "Memory budget of this rank (0: unlimited).");
  predicted_step_ = gauge("qsync_worker_predicted_step_seconds",
                          "Step time the precision plan predicts for this rank (0: unknown).");
  test_accuracy_ = gauge("qsync_worker_test_accuracy", "Accuracy of the last evaluation (0..1).");
  local_batch_ = gauge("qsync_worker_local_batch", "Samples per step on this rank.");
  layer_precision_family_ = &prometheus::BuildGauge()
                                 .Name("qsync_worker_layer_precision_info")
                                 .Help("Precision of each GEMM layer in the plan (value is always 1).")
                                 .Labels(constant)
                                 .Register(*registry_);

  const std::string listen = listen_spec(config.bind_address, config.port);
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on " + listen + ": " +
                             probe_bind_failure(config.bind_address, config.port) + " (civetweb: " + e.what() + ")");
  }
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    throw std::runtime_error("metrics server on " + listen +
                             " reports no listening port; pass an explicit --metrics-port N");
  }
  port_ = ports.front();
}

WorkerTelemetry::~WorkerTelemetry() = default;

std::string WorkerTelemetry::url() const {
  return "http://" + listen_spec(bind_address_, port_) + "/metrics";
}

void WorkerTelemetry::record_step(double step_seconds, double compute_seconds, double wait_seconds,
                                  double allreduce_seconds, double loss, int64_t samples) {
  step_duration_->Observe(step_seconds);
  compute_duration_->Observe(compute_seconds);
  sync_wait_duration_->Observe(wait_seconds);
  allreduce_duration_->Observe(allreduce_seconds);
  loss_->Set(loss);
  if (samples > 0) samples_->Increment(double(samples));
  steps_->Increment();
}

void WorkerTelemetry::set_plan(const std::vector<std::pair<std::string, std::string>>& layer_precisions,
                               double predicted_step_seconds, int64_t local_batch) {
  {
    std::lock_guard<std::mutex> lock(plan_mutex_);
    for (prometheus::Gauge* g : layer_precision_series_) layer_precision_family_->Remove(g);
    layer_precision_series_.clear();
    for (const auto& [layer, precision] : layer_precisions) {
      prometheus::Gauge& g = layer_precision_family_->Add({{"layer", layer}, {"precision", precision}});
      g.Set(1);
      // A layer listed twice yields the same series: keep one pointer so Remove sees it once.
      if (std::find(layer_precision_series_.begin(), layer_precision_series_.end(), &g) ==
          layer_precision_series_.end()) {
        layer_precision_series_.push_back(&g);
      }
    }
  }
  predicted_step_->Set(predicted_step_seconds > 0 ? predicted_step_seconds : 0);
  local_batch_->Set(double(local_batch));
}

void WorkerTelemetry::set_memory(int64_t peak_bytes, int64_t budget_bytes) {
  peak_memory_->Set(double(peak_bytes));
  memory_budget_->Set(double(budget_bytes));
}

void WorkerTelemetry::set_test_accuracy(double accuracy) { test_accuracy_->Set(accuracy); }

}  // namespace qsync
