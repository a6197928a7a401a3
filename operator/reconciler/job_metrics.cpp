// File: operator/reconciler/job_metrics.cpp
// Job counters, the jobs-by-phase gauge and the planning histogram (see job_metrics.h).
#include "operator/reconciler/job_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "operator/api/hybrid_training_job_status.h"

namespace qsync::reconciler {

JobMetrics::JobMetrics(prometheus::Registry& registry) {
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
  };
  created_ = counter("qsync_operator_jobs_created_total", "HybridTrainingJobs whose workers the operator created.");
  succeeded_ = counter("qsync_operator_jobs_succeeded_total", "HybridTrainingJobs that succeeded.");
  failed_ = counter("qsync_operator_jobs_failed_total", "HybridTrainingJobs that failed.");
  restarts_ = counter("qsync_operator_jobs_restarts_total", "Whole-job restarts from the last checkpoint.");
  jobs_ = &prometheus::BuildGauge().Name("qsync_operator_jobs").Help("HybridTrainingJobs by status.phase.").Register(registry);
  planning_ = &prometheus::BuildHistogram()
                   .Name("qsync_operator_planning_duration_seconds")
                   .Help("Time to discover the pool, load the profiles and run the allocator for one job.")
                   .Register(registry)
                   .Add({}, prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
}

void JobMetrics::job_created() { created_->Increment(); }
void JobMetrics::job_succeeded() { succeeded_->Increment(); }
void JobMetrics::job_failed() { failed_->Increment(); }
void JobMetrics::job_restarted() { restarts_->Increment(); }
void JobMetrics::planning_finished(double seconds) { planning_->Observe(seconds); }
double JobMetrics::created() const { return created_->Value(); }
double JobMetrics::succeeded() const { return succeeded_->Value(); }
double JobMetrics::failed() const { return failed_->Value(); }
double JobMetrics::restarts() const { return restarts_->Value(); }

void JobMetrics::set_jobs_by_phase(const std::vector<nlohmann::json>& jobs) {
  std::map<std::string, int> counts;
  for (const nlohmann::json& j : jobs) {
    std::string phase;
    if (j.contains("status") && j["status"].is_object()) phase = j["status"].value("phase", "");
    counts[phase.empty() ? api::PHASE_PENDING : phase]++;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [phase, gauge] : phase_gauges_) gauge->Set(0);
  for (const auto& [phase, n] : counts) {
    auto it = phase_gauges_.find(phase);
    if (it == phase_gauges_.end()) it = phase_gauges_.emplace(phase, &jobs_->Add({{"phase", phase}})).first;
    it->second->Set(n);
  }
}

}  // namespace qsync::reconciler
