// File: operator/reconciler/job_reconcile_pass.h
// Internal to the job reconciler (job_reconciler.cpp, job_pods_pass.cpp, job_ending.cpp,
// job_lending_pass.cpp, job_elastic_pass.cpp): what one reconcile pass holds, and the small
// readers of API objects they share.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/controller/controller.h"
#include "operator/reconciler/job_borrowing.h"
#include "operator/reconciler/job_reconciler.h"

namespace qsync::reconciler {

struct JobReconciler::Pass {
  nlohmann::json object;
  api::HybridTrainingJob job;
  api::HybridTrainingJobStatus old_status, status;
  std::string ns, name, uid, now;
  int64_t generation = 0;
  std::vector<nlohmann::json> pods;  // owned by this job
  std::vector<BorrowSource> sources;  // the borrowing entries
  ElasticBounds bounds;
  std::vector<nlohmann::json> nodes;  // read once per pass (elastic jobs)
};

// A pass's view of the job's pods (job_pods_pass.cpp): census_pods sorts them, then
// create_missing_pods counts what it did.
struct JobReconciler::PodCensus {
  std::map<int64_t, const nlohmann::json*> current;  // this attempt's pods by rank
  int64_t stale = 0;    // pods of an older attempt (or dropped ranks) not gone yet
  int64_t resized = 0;  // this attempt's pods of another world size (a changed count)
  int64_t created = 0;  // pods created in this pass
  int64_t blocked = 0;  // pods not created yet: an older attempt's still terminating
  int64_t vanished_rank = -1;  // the first rank whose pod was created before and is gone now
};

namespace pass {

std::string label(const nlohmann::json& o, const char* key);
std::string name_of(const nlohmann::json& o);
bool terminating(const nlohmann::json& o);
std::string pod_phase(const nlohmann::json& pod);
bool owned_by(const nlohmann::json& child, const std::string& uid);
// The node a pod runs on (spec.nodeName) or was planned for (the qsync.dev/node annotation).
std::string pod_node(const nlohmann::json& pod);
controller::ReconcileResult requeue_after(std::chrono::milliseconds delay);
// The earliest status.startTime of `pods` not being deleted (RFC 3339 in UTC sorts as time);
// "" when none started.
std::string earliest_pod_start(const std::vector<nlohmann::json>& pods);

}  // namespace pass
}  // namespace qsync::reconciler
