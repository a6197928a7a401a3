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
  borrowed_ = &prometheus::BuildGauge()
                   .Name("qsync_operator_borrowed_devices")
                   .Help("GPUs a HybridTrainingJob borrows from inference workloads now.")
                   .Register(registry);
  job_restarts_ = &prometheus::BuildGauge()
                       .Name("qsync_operator_job_restarts")
                       .Help("A HybridTrainingJob's whole-job restarts so far (its status.restarts).")
                       .Register(registry);
  reclaims_ = &prometheus::BuildCounter()
                   .Name("qsync_operator_reclaims_total")
                   .Help("Reclaims of lent inference GPUs, by trigger and whether the replicas were Ready within reclaimGraceSeconds.")
                   .Register(registry);
  reclaim_seconds_ = &prometheus::BuildHistogram()
                          .Name("qsync_operator_reclaim_seconds")
                          .Help("Seconds from a reclaim's trigger to the inference replicas Ready.")
                          .Register(registry)
                          .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800});
  resizes_ = &prometheus::BuildCounter()
                  .Name("qsync_operator_resizes_total")
                  .Help("Elastic resizes of HybridTrainingJobs (checkpoint, re-plan, restart at the new world size), by reason.")
                  .Register(registry);
  // Series that exist before the first event, so dashboards and alerts see zeros, not gaps.
  for (const char* result : {"within_grace", "missed"}) reclaims_->Add({{"reason", "DemandHigh"}, {"result", result}});
  for (const char* reason : {"PoolGrew", "PoolShrank"}) resizes_->Add({{"reason", reason}});
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

void JobMetrics::set_borrowed_devices(const std::string& ns, const std::string& job, double devices) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = borrowed_gauges_.find({ns, job});
  if (it == borrowed_gauges_.end())
    it = borrowed_gauges_.emplace(std::make_pair(ns, job), &borrowed_->Add({{"namespace", ns}, {"job", job}})).first;
  it->second->Set(devices);
}

void JobMetrics::set_job_restarts(const std::string& ns, const std::string& job, double restarts) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_restart_gauges_.find({ns, job});
  if (it == job_restart_gauges_.end())
    it = job_restart_gauges_.emplace(std::make_pair(ns, job), &job_restarts_->Add({{"namespace", ns}, {"job", job}})).first;
  it->second->Set(restarts);
}

double JobMetrics::job_restarts(const std::string& ns, const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_restart_gauges_.find({ns, job});
  return it == job_restart_gauges_.end() ? 0 : it->second->Value();
}

void JobMetrics::forget_job(const std::string& ns, const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = borrowed_gauges_.find({ns, job}); it != borrowed_gauges_.end()) {
    borrowed_->Remove(it->second);
    borrowed_gauges_.erase(it);
  }
  if (auto it = job_restart_gauges_.find({ns, job}); it != job_restart_gauges_.end()) {
    job_restarts_->Remove(it->second);
    job_restart_gauges_.erase(it);
  }
}

void JobMetrics::reclaim_finished(const std::string& reason, double seconds, bool within_grace) {
  reclaims_->Add({{"reason", reason}, {"result", within_grace ? "within_grace" : "missed"}}).Increment();
  reclaim_seconds_->Observe(seconds);
}

void JobMetrics::resized(const std::string& reason) { resizes_->Add({{"reason", reason}}).Increment(); }

double JobMetrics::borrowed_devices(const std::string& ns, const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = borrowed_gauges_.find({ns, job});
  return it == borrowed_gauges_.end() ? 0 : it->second->Value();
}

double JobMetrics::reclaims(const std::string& reason, bool within_grace) const {
  return reclaims_->Add({{"reason", reason}, {"result", within_grace ? "within_grace" : "missed"}}).Value();
}

double JobMetrics::resizes(const std::string& reason) const { return resizes_->Add({{"reason", reason}}).Value(); }

uint64_t JobMetrics::reclaim_observations() const {
  const prometheus::ClientMetric m = reclaim_seconds_->Collect();
  return m.histogram.sample_count;
}

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
