// File: planner/job_spec.h
// The job: what to train, on what data, how long, with what batch, checkpoints, planning policy
// and pool of devices, as C++ types. It is the spec of a HybridTrainingJob, and the ONE parser of
// it: the operator reads the objects of the API server with job_spec_from_json, `qsync run` and
// `qsync-plan` read job files (HybridTrainingJob manifests) with job_file_load. Both default and
// validate through the field table (job_fields.h) the CRD's schema is generated from, then check
// the rules a schema cannot state, with messages that name the field and the fix.
//
//   apiVersion: qsync.dev/v1alpha1
//   kind: HybridTrainingJob
//   metadata: {name: fmnist-hybrid}
//   spec:
//     model: {zoo: cnn}                       # or {file: path/to/model.yaml}, {onnx: model.onnx}, {configMap: ...}
//     data: {path: /usr/share/datasets/fashion-mnist}
//     optimizer: {name: adamw, lr: 0.002, weightDecay: 0, warmupSteps: 0, gradClip: 0, schedule: cosine}
//     steps: 400                              # or epochs: 1.5
//     globalBatch: 128
//     checkpoint: {dir: checkpoints, intervalSteps: 100, keep: 2}
//     planning: {allocator: exact, precision: fp32, stepTimeTarget: 250ms, lowPrecision: int8}
//     pool:
//       local:                                # `qsync run`: local worker processes
//         - {deviceClass: cpu-avx2, threads: 1, memoryBudget: 2Gi}
//       training: [...]                        # the operator: nodes by selector
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

#include "planner/job_borrow_spec.h"
#include "planner/job_pod_template.h"
#include "planner/job_scheduling_policy.h"

namespace qsync {

inline constexpr const char* JOB_API_VERSION = "qsync.dev/v1alpha1";
inline constexpr const char* JOB_KIND = "HybridTrainingJob";
// spec.runPolicy.managedBy's default: jobs with another value belong to another controller.
inline constexpr const char* JOB_DEFAULT_MANAGER = "qsync.dev/operator";

struct ConfigMapKey {
  std::string name, key;
  bool operator==(const ConfigMapKey&) const = default;
};

struct ModelSource {  // exactly one is set
  std::string zoo;
  std::string file;
  std::string onnx;  // an ONNX model file (planner/model_onnx.h)
  std::optional<ConfigMapKey> config_map;
  bool operator==(const ModelSource&) const = default;
  // The zoo name, or the file (YAML or ONNX) as written in the job.
  const std::string& name_or_file() const { return !zoo.empty() ? zoo : !onnx.empty() ? onnx : file; }
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
  int64_t keep = 2;  // checkpoints kept (`qsync-worker train --keep-checkpoints`)
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
  bool off_peak_only = false;            // inference entries only (needs borrow)
  std::optional<BorrowSpec> borrow;      // inference entries only: lend GPUs from a workload (job_borrow_spec.h)
  PodTemplateSpec pod_template;          // on top of spec.podTemplate (job_pod_template.h)
  bool operator==(const PoolEntry&) const = default;
};

// A `qsync run` worker process (the operator ignores these).
struct LocalWorker {
  std::string name;
  std::string device_class;
  int64_t threads = 1;
  std::string memory_budget;
  int64_t memory_budget_bytes = 0;  // 0: unlimited
  std::string precision;            // overrides planning.precision for this worker ("" = none)
  int64_t local_batch = 0;          // 0: the global batch split evenly
  bool operator==(const LocalWorker&) const = default;
};

struct PoolSpec {
  std::vector<PoolEntry> training, inference;
  std::vector<LocalWorker> local;
  bool operator==(const PoolSpec&) const = default;
};

struct PlanningSpec {
  std::string allocator = "exact";     // allocator_strategies() (allocator.h)
  std::string precision = "fp32";      // the training devices' precision (uniform: every rank's)
  std::string low_precision = "int8";  // uniform-low-weak: the weak ranks' precision
  std::string step_time_target;        // "250ms"; "" = the training devices' step time
  double step_time_target_seconds = 0;
  std::string indicator = "bidirectional";  // bidirectional | weight-error
  bool batch_moves = true;  // let the allocator move batch between ranks (allocator_exact.cpp)
  std::string profiles;     // measured device profiles ("": `qsync run` measures them)
  std::string calibration;  // calibration stats file ("": `qsync run` collects them)
  bool operator==(const PlanningSpec&) const = default;
};

struct RunPolicy {
  int64_t backoff_limit = 3;  // whole-job restarts
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  std::string clean_pod_policy = "Running";  // None | Running | All
  bool suspend = false;
  std::string managed_by = JOB_DEFAULT_MANAGER;
  std::optional<SchedulingPolicy> scheduling_policy;  // gang scheduling (job_scheduling_policy.h)
  bool operator==(const RunPolicy&) const = default;
};

struct JobSpec {
  ModelSource model;
  DataSource data;
  OptimizerSpec optimizer;
  std::optional<int64_t> steps;
  std::optional<double> epochs;
  int64_t global_batch = 128;
  int64_t seed = 1;
  int64_t eval_limit = 0;  // 0: the whole test set
  int64_t eval_every = 0;  // evaluate every K steps too (0: at the end only)
  CheckpointSpec checkpoint;
  std::string image = "ghcr.io/qsync/qsync-worker:0.1.0";
  std::string image_pull_policy;  // "" = Kubernetes' default
  std::optional<ResourceRequirements> resources;
  PodTemplateSpec pod_template;  // every worker pod's (job_pod_template.h); empty: none
  PoolSpec pool;
  std::optional<ElasticPolicy> elastic_policy;  // job_borrow_spec.h
  PlanningSpec planning;
  RunPolicy run_policy;
  bool operator==(const JobSpec&) const = default;
};

// Reads .spec (defaults applied, the table's checks and the cross-field rules). Throws
// std::invalid_argument listing every problem, each naming the field and the fix.
JobSpec job_spec_from_json(const nlohmann::json& spec);
// Writes the spec back; defaulted fields are written out, optional ones only when set.
nlohmann::json to_json(const JobSpec& spec);

// A job file: a HybridTrainingJob manifest on disk, as `qsync run` and `qsync-plan` read it.
struct JobFile {
  std::string name;    // metadata.name
  std::string source;  // the file, for messages
  JobSpec spec;

  // The model as the worker's --model takes it: the zoo name, or the model file resolved against
  // the job file's folder.
  std::string model_reference() const;
  // A path of the spec (profiles, calibration, a model file) resolved against the job file's
  // folder; absolute and empty paths are returned as they are.
  std::string resolve(const std::string& path) const;
};

// Parses a job file (any valid manifest). Errors (std::invalid_argument) start with the file's
// name.
JobFile job_file_load(const std::string& path);
JobFile job_file_parse(const std::string& yaml_text, const std::string& source);
// What keeps a job file from running on local workers (`qsync run`, `qsync-plan`): an empty
// spec.pool.local, a model in a ConfigMap, a global batch below the number of local ranks,
// localBatch values that do not add up to globalBatch. Empty when it can run.
std::vector<std::string> job_file_local_problems(const JobFile& job);
// A YAML document as JSON (YAML 1.2 core schema: plain scalars that read as integers, floats,
// booleans or null become those; quoted scalars stay strings). Throws std::invalid_argument with
// the line and column of malformed YAML (planner/job_yaml.cpp).
nlohmann::json job_yaml_to_json(const std::string& yaml_text);

// Quantities (planner/job_quantities.cpp).
// "250ms", "1.5s", "2m", "0.25" (seconds) -> seconds.
double parse_duration_seconds(const std::string& s, const std::string& what);
// "2Gi", "512Mi", "1G", "1000000" -> bytes (Kubernetes quantity suffixes).
int64_t parse_memory_quantity(const std::string& s, const std::string& what);

}  // namespace qsync
