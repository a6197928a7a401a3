// File: operator/api/hybrid_training_job.h
// The HybridTrainingJob custom resource (qsync.dev/v1alpha1) as C++ types, and its JSON form.
// Parsing applies the CRD's defaults and checks the CRD's rules from the same field table the
// CRD's YAML is generated from (crd_fields.cpp), then the rules a schema cannot state: exactly one
// of steps or epochs, exactly one model source, and at least one training or inference pool
// entry (the operator's pool; `pool.local` is for `qsync run` only).
//
//   const HybridTrainingJob job = hybrid_training_job_from_json(object_from_the_api);
//   job.spec.global_batch, job.spec.pool.training[0].node_selector, job.status->phase
//
// Optional fields without a default are std::optional, or "" for strings (the schema forbids
// empty strings there, so "" always means "absent").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/group_version.h"
#include "operator/api/hybrid_training_job_status.h"

namespace qsync::api {

struct ConfigMapKey {
  std::string name, key;
  bool operator==(const ConfigMapKey&) const = default;
};

struct ModelSource {  // exactly one is set
  std::string zoo;
  std::string file;
  std::optional<ConfigMapKey> config_map;
  bool operator==(const ModelSource&) const = default;
};

struct VolumeClaim {
  std::string claim_name;
  std::string path;  // inside the volume ("" for checkpoint volumes: checkpoint.dir says where)
  bool operator==(const VolumeClaim&) const = default;
};

struct DataSource {  // at most one is set; neither: the model's default dataset
  std::string path;
  std::optional<VolumeClaim> volume;
  bool operator==(const DataSource&) const = default;
};

struct OptimizerSpec {
  std::string name = "adamw";  // adamw | sgd
  double lr = 0.001;
  double weight_decay = 0;
  int64_t warmup_steps = 0;
  double grad_clip = 0;
  std::string schedule = "cosine";  // constant | cosine
  bool operator==(const OptimizerSpec&) const = default;
};

struct CheckpointSpec {
  std::string dir;
  std::optional<VolumeClaim> volume;
  int64_t interval_steps = 100;
  bool operator==(const CheckpointSpec&) const = default;
};

// Kubernetes quantities as strings ("4", "500m", "16Gi"); integers read as their decimal text,
// as the API server returns them.
struct ResourceRequirements {
  std::map<std::string, std::string> requests, limits;
  bool operator==(const ResourceRequirements&) const = default;
};

// One training or inference entry of the pool: `count` ranks on nodes matching node_selector.
struct PoolEntry {
  std::string name;
  std::map<std::string, std::string> node_selector;
  int64_t count = 1;
  std::string device_class;  // "": from the node's qsync.dev/device-class or nvidia.com/gpu.product label
  std::string memory_budget;  // quantity, "" = the device's memory
  int64_t memory_budget_bytes = 0;
  std::optional<int64_t> gpus_per_rank;  // absent: 1 on GPU classes, 0 on CPU classes
  bool off_peak_only = false;            // inference entries only
  bool operator==(const PoolEntry&) const = default;
};

// A `qsync run` worker process (the operator ignores these).
struct LocalWorker {
  std::string name;
  std::string device_class;
  int64_t threads = 1;
  std::string memory_budget;
  int64_t memory_budget_bytes = 0;
  std::string precision;
  int64_t local_batch = 0;
  bool operator==(const LocalWorker&) const = default;
};

struct PoolSpec {
  std::vector<PoolEntry> training, inference;
  std::vector<LocalWorker> local;
  bool operator==(const PoolSpec&) const = default;
};

struct PlanningSpec {
  std::string allocator = "exact";
  std::string precision = "fp32";
  std::string low_precision = "int8";
  std::string step_time_target;  // "250ms"; "" = the training devices' step time
  double step_time_target_seconds = 0;
  std::string indicator = "bidirectional";
  bool batch_moves = true;
  std::string profiles;
  std::string calibration;
  bool operator==(const PlanningSpec&) const = default;
};

struct RunPolicy {
  int64_t backoff_limit = 3;  // whole-job restarts
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  std::string clean_pod_policy = "Running";  // None | Running | All
  bool suspend = false;
  std::string managed_by = OPERATOR_MANAGER;
  bool operator==(const RunPolicy&) const = default;
};

struct HybridTrainingJobSpec {
  ModelSource model;
  DataSource data;
  OptimizerSpec optimizer;
  std::optional<int64_t> steps;
  std::optional<double> epochs;
  int64_t global_batch = 128;
  int64_t seed = 1;
  int64_t eval_limit = 0;
  int64_t eval_every = 0;
  CheckpointSpec checkpoint;
  std::string image = "ghcr.io/qsync/qsync-worker:0.1.0";
  std::string image_pull_policy;  // "" = Kubernetes' default
  std::optional<ResourceRequirements> resources;
  PoolSpec pool;
  PlanningSpec planning;
  RunPolicy run_policy;
  bool operator==(const HybridTrainingJobSpec&) const = default;
};

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

// Reads .spec alone (defaults applied, all rules checked).
HybridTrainingJobSpec hybrid_training_job_spec_from_json(const nlohmann::json& spec);

// Writes the object back; defaulted fields are written out, optional ones only when set.
nlohmann::json to_json(const HybridTrainingJob& job);
nlohmann::json to_json(const HybridTrainingJobSpec& spec);

}  // namespace qsync::api
