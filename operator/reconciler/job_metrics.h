// File: operator/reconciler/job_metrics.h
// The operator's job-level Prometheus metrics, registered in the manager's registry next to
// controller-runtime's (operator_metrics.h):
//   qsync_operator_jobs_created_total, qsync_operator_jobs_succeeded_total,
//   qsync_operator_jobs_failed_total, qsync_operator_jobs_restarts_total   (counters)
//   qsync_operator_jobs{phase}                                            (gauge: jobs per phase)
//   qsync_operator_planning_duration_seconds                              (histogram)
//   qsync_operator_job_restarts{namespace,job}    (gauge: the job's status.restarts, per job)
// and off-peak borrowing (docs/borrowing.md):
//   qsync_operator_borrowed_devices{namespace,job}      (gauge: GPUs the job borrows now)
//   qsync_operator_reclaims_total{reason,result}        (counter: result within_grace | missed)
//   qsync_operator_reclaim_seconds                      (histogram: trigger -> replicas Ready)
//   qsync_operator_resizes_total{reason}                (counter: PoolGrew, PoolShrank, BelowMinRanks)
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace qsync::reconciler {

class JobMetrics {
 public:
  explicit JobMetrics(prometheus::Registry& registry);

  void job_created();
  void job_succeeded();
  void job_failed();
  void job_restarted();
  void planning_finished(double seconds);
  // Sets qsync_operator_jobs{phase} from the jobs (status.phase; "" counts as Pending). Phases
  // seen before and now absent read 0.
  void set_jobs_by_phase(const std::vector<nlohmann::json>& jobs);
  void set_borrowed_devices(const std::string& ns, const std::string& job, double devices);
  void set_job_restarts(const std::string& ns, const std::string& job, double restarts);
  void forget_job(const std::string& ns, const std::string& job);  // its per-job series go
  void reclaim_finished(const std::string& reason, double seconds, bool within_grace);
  void resized(const std::string& reason);

  // Current values (tests).
  double created() const;
  double succeeded() const;
  double failed() const;
  double restarts() const;
  double borrowed_devices(const std::string& ns, const std::string& job) const;
  double job_restarts(const std::string& ns, const std::string& job) const;
  double reclaims(const std::string& reason, bool within_grace) const;
  double resizes(const std::string& reason) const;
  uint64_t reclaim_observations() const;

 private:
  prometheus::Counter* created_;
  prometheus::Counter* succeeded_;
  prometheus::Counter* failed_;
  prometheus::Counter* restarts_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Histogram* planning_;
  prometheus::Family<prometheus::Gauge>* borrowed_;
  prometheus::Family<prometheus::Counter>* reclaims_;
  prometheus::Histogram* reclaim_seconds_;
  prometheus::Family<prometheus::Counter>* resizes_;
  mutable std::mutex mu_;
  std::map<std::string, prometheus::Gauge*> phase_gauges_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> borrowed_gauges_;
  prometheus::Family<prometheus::Gauge>* job_restarts_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> job_restart_gauges_;
};

}  // namespace qsync::reconciler
