// File: operator/api/hybrid_training_job.h
// The HybridTrainingJob custom resource (qsync.dev/v1alpha1) as C++ types, and its JSON form:
// metadata kept whole, the spec parsed by the job's one parser (planner/job_spec.h: the field
// table's defaults and checks, the cross-field rules), plus the operator's own rule (at least one
// training or inference pool entry; `pool.local` is for `qsync run` only), and the status.
//
//   const HybridTrainingJob job = hybrid_training_job_from_json(object_from_the_api);
//   job.spec.global_batch, job.spec.pool.training[0].node_selector, job.status->phase
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/group_version.h"
#include "planner/job_spec.h"
#include "operator/api/hybrid_training_job_status.h"

namespace qsync::api {

// The spec is the job's, owned by the planner (planner/job_spec.h: one schema for the operator,
// `qsync run` and `qsync-plan`); these names keep the operator's spelling.
using HybridTrainingJobSpec = qsync::JobSpec;
using qsync::CheckpointSpec;
using qsync::ConfigMapKey;
using qsync::DataSource;
using qsync::LocalWorker;
using qsync::ModelSource;
using qsync::OptimizerSpec;
using qsync::PlanningSpec;
using qsync::PoolEntry;
using qsync::PoolSpec;
using qsync::ResourceRequirements;
using qsync::RunPolicy;
using qsync::VolumeClaim;

struct HybridTrainingJob {
  nlohmann::json metadata = nlohmann::json::object();  // kept whole: ownerReferences, finalizers, ...
  HybridTrainingJobSpec spec;
  std::optional<HybridTrainingJobStatus> status;

  std::string name() const;
  std::string namespace_name() const;
  int64_t generation() const;  // 0 when the object has not been stored yet
  bool operator==(const HybridTrainingJob&) const = default;
};

// Reads a whole object (apiVersion, kind, metadata, spec, status). Throws std::invalid_argument
// listing every problem, each naming the field and the fix.
HybridTrainingJob hybrid_training_job_from_json(const nlohmann::json& object);

// Reads .spec alone (defaults applied, all rules checked, the operator's pool rule included).
HybridTrainingJobSpec hybrid_training_job_spec_from_json(const nlohmann::json& spec);

// Writes the object back; defaulted fields are written out, optional ones only when set.
nlohmann::json to_json(const HybridTrainingJob& job);
using qsync::to_json;  // the spec's (planner/job_spec.h)

}  // namespace qsync::api
