// File: operator/reconciler/job_metrics.h
// The operator's job-level Prometheus metrics, registered in the manager's registry next to
// controller-runtime's (operator_metrics.h):
//   qsync_operator_jobs_created_total, qsync_operator_jobs_succeeded_total,
//   qsync_operator_jobs_failed_total, qsync_operator_jobs_restarts_total   (counters)
//   qsync_operator_jobs{phase}                                            (gauge: jobs per phase)
//   qsync_operator_planning_duration_seconds                              (histogram)
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

  // Current values (tests).
  double created() const;
  double succeeded() const;
  double failed() const;
  double restarts() const;

 private:
  prometheus::Counter* created_;
  prometheus::Counter* succeeded_;
  prometheus::Counter* failed_;
  prometheus::Counter* restarts_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Histogram* planning_;
  std::mutex mu_;
  std::map<std::string, prometheus::Gauge*> phase_gauges_;
};

}  // namespace qsync::reconciler
