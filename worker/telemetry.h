// File: worker/telemetry.h
// Prometheus telemetry of one training worker: serves /metrics over HTTP (pull model, scraped by
// Prometheus) with the step timings, loss, throughput, memory and the per-layer precision plan of
// one rank. Every series carries the constant labels job, rank and device_class.
//
//   WorkerTelemetry t({.port = 0, .job = "fmnist", .rank = 0, .device_class = "cpu-avx512"});
//   t.port();                                   // the port bound (a free one when port was 0)
//   t.set_plan({{"fc1", "int8"}, {"fc2", "fp32"}}, 0.12, 64);
//   t.record_step(0.13, 0.10, 0.02, 0.01, 2.31, 64);
//
// Metrics (all prefixed qsync_worker_): step_duration_seconds, compute_duration_seconds,
// sync_wait_duration_seconds, allreduce_duration_seconds (histograms, 1 ms .. 10 s), loss,
// peak_memory_bytes, memory_budget_bytes, predicted_step_seconds, test_accuracy, local_batch
// (gauges), samples_total, steps_total (counters), layer_precision_info (gauge = 1 per GEMM layer,
// labels layer and precision). The class is thread-safe: a training thread records while the
// server's threads serve scrapes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace qsync {

struct WorkerTelemetryConfig {
  std::string bind_address = "127.0.0.1";  // IPv4 only (0.0.0.0: every interface)
  int port = 0;                            // 0: pick a free port (see WorkerTelemetry::port())
  std::string job = "local";               // training job name (label job)
  int rank = 0;                            // data-parallel rank (label rank)
  std::string device_class;                // e.g. cpu-avx512 (label device_class)
};

class WorkerTelemetry {
 public:
  // Starts serving /metrics. Throws std::runtime_error naming the address, the port and the flag
  // to change (--metrics-port) when the port cannot be bound, std::invalid_argument on a port
  // outside 0..65535 or an address that is not IPv4.
  explicit WorkerTelemetry(const WorkerTelemetryConfig& config);
  ~WorkerTelemetry();
  WorkerTelemetry(const WorkerTelemetry&) = delete;
  WorkerTelemetry& operator=(const WorkerTelemetry&) = delete;

  // The port /metrics is served on (the one picked when the config asked for port 0).
  int port() const { return port_; }
  // "http://ADDRESS:PORT/metrics".
  std::string url() const;

  // One training step: wall time of the whole step, and its parts (forward + backward compute,
  // waiting for the slowest rank at the gradient sync, the all-reduce itself; 0 when single-rank).
  void record_step(double step_seconds, double compute_seconds, double wait_seconds,
                   double allreduce_seconds, double loss, int64_t samples);
  // The precision plan in effect: (layer, precision) per GEMM layer, the plan's predicted step time
  // (0 when unknown) and this rank's local batch. Replaces the series of an earlier call.
  void set_plan(const std::vector<std::pair<std::string, std::string>>& layer_precisions,
                double predicted_step_seconds, int64_t local_batch);
  void set_memory(int64_t peak_bytes, int64_t budget_bytes);
  void set_test_accuracy(double accuracy);

 private:
  int port_ = 0;
  std::string bind_address_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  prometheus::Histogram* step_duration_ = nullptr;
  prometheus::Histogram* compute_duration_ = nullptr;
  prometheus::Histogram* sync_wait_duration_ = nullptr;
  prometheus::Histogram* allreduce_duration_ = nullptr;
  prometheus::Gauge* loss_ = nullptr;
  prometheus::Counter* samples_ = nullptr;
  prometheus::Counter* steps_ = nullptr;
  prometheus::Gauge* peak_memory_ = nullptr;
  prometheus::Gauge* memory_budget_ = nullptr;
  prometheus::Gauge* predicted_step_ = nullptr;
  prometheus::Gauge* test_accuracy_ = nullptr;
  prometheus::Gauge* local_batch_ = nullptr;

  std::mutex plan_mutex_;  // guards layer_precision_series_
  prometheus::Family<prometheus::Gauge>* layer_precision_family_ = nullptr;
  std::vector<prometheus::Gauge*> layer_precision_series_;
};

}  // namespace qsync
