// File: planner/job_fields.cpp
// The job's spec field table. Field names are the HybridTrainingJob's (for runPolicy,
// Kubeflow's training operator's), so a job file is a valid manifest and users meet the names
// they know. Allocator and precision names come from their own tables (allocator.h,
// layer_precision.h), never spelled out here.
#include "planner/job_fields.h"

#include "planner/job_borrow_spec.h"
#include "planner/job_pod_template.h"
#include "planner/job_scheduling_policy.h"
#include "planner/job_spec.h"

#include <utility>

#include "planner/allocator.h"
#include "planner/layer_precision.h"

namespace qsync {
namespace {

Field make(std::string path, FieldType type, std::string description) {
  Field f;
  f.path = std::move(path);
  f.type = type;
  f.description = std::move(description);
  return f;
}

std::vector<std::string> precision_names() {
  std::vector<std::string> names;
  for (const auto& traits : layer_precision_table()) names.push_back(traits.name);
  return names;
}

const char* DNS_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
const char* DNS_LABEL_HINT = "a lower-case DNS label such as train-a100";

// The fields of one training or inference pool entry, under `prefix` ("spec.pool.training[]").
void add_pool_entry_fields(std::vector<Field>& fields, const std::string& prefix, bool inference) {
  fields.push_back(Field::string(prefix + ".name", "The entry's name, part of its pods' names.")
                       .mandatory()
                       .matching(DNS_LABEL_PATTERN, DNS_LABEL_HINT));
  fields.push_back(Field::string_map(prefix + ".nodeSelector",
                                     "Labels a node must carry to lend ranks to this entry (all nodes when empty)."));
  fields.push_back(Field::integer(prefix + ".count",
                                  "Ranks drawn from the matching nodes: one pod per rank, spread over the nodes.")
                       .with_default(1)
                       .at_least(1));
  fields.push_back(Field::string(prefix + ".deviceClass",
                                 "The device class to plan these ranks as (e.g. a100, t4, cpu-avx2). Default: the "
                                 "node's qsync.dev/device-class label, else its nvidia.com/gpu.product label.")
                       .non_empty());
  fields.push_back(Field::string(prefix + ".memoryBudget", "Device memory a rank may use, as a quantity (e.g. 16Gi).")
                       .matching(QUANTITY_PATTERN, "a quantity such as 16Gi or 512Mi"));
  fields.push_back(Field::integer(prefix + ".gpusPerRank",
                                  "GPUs (nvidia.com/gpu) each rank's pod requests. Default: 1 on GPU classes, 0 on "
                                  "CPU classes.")
                       .at_least(0));
  if (inference) {
    fields.push_back(Field::boolean(prefix + ".offPeakOnly",
                                    "Use these inference nodes only off peak; needs borrow, whose windows or demand say "
                                    "when that is (a borrowing entry always is).")
                         .with_default(false));
    add_borrow_fields(fields, prefix + ".borrow");  // planner/job_borrow_spec.h
  }
  add_pod_template_fields(fields, prefix + ".podTemplate");  // planner/job_pod_template.h: on top of spec.podTemplate
}

std::vector<Field> build_spec_fields() {
  std::vector<Field> f;
  const std::vector<std::string> precisions = precision_names();

  f.push_back(Field::object("spec.model", "What to train: exactly one of zoo, file, onnx or configMap.")
                  .mandatory()
                  .with_rule("(has(self.zoo) ? 1 : 0) + (has(self.file) ? 1 : 0) + (has(self.onnx) ? 1 : 0) + "
                             "(has(self.configMap) ? 1 : 0) == 1",
                             "set exactly one of zoo, file, onnx or configMap"));
  f.push_back(Field::string("spec.model.zoo", "A model of the built-in zoo (e.g. cnn, mlp, transformer).").non_empty());
  f.push_back(Field::string("spec.model.file", "A model description file (YAML) inside the worker image.").non_empty());
  f.push_back(Field::string("spec.model.onnx", "An ONNX model file (torch.onnx.export; tools/export_onnx.py) inside "
                                               "the worker image, or beside the job file for qsync run.")
                  .non_empty());
  f.push_back(Field::object("spec.model.configMap", "A model description (YAML, or ONNX under a key ending .onnx in "
                                                    "binaryData) held in a ConfigMap."));
  f.push_back(Field::string("spec.model.configMap.name", "The ConfigMap's name.").mandatory().non_empty());
  f.push_back(Field::string("spec.model.configMap.key", "The key holding the model YAML (or the .onnx bytes).").mandatory().non_empty());

  f.push_back(Field::object("spec.data", "The training data: a path, or a PersistentVolumeClaim. Default: the model's.")
                  .with_rule("!(has(self.path) && has(self.volume))", "set path or volume, not both"));
  f.push_back(Field::string("spec.data.path", "A dataset directory or file on the node or in the image.").non_empty());
  f.push_back(Field::object("spec.data.volume", "A PersistentVolumeClaim holding the dataset."));
  f.push_back(Field::string("spec.data.volume.claimName", "The PersistentVolumeClaim's name.").mandatory().non_empty());
  f.push_back(Field::string("spec.data.volume.path", "The dataset's path inside the volume.").non_empty());

  f.push_back(Field::object("spec.optimizer", "The optimizer and its learning-rate schedule.").with_default(nlohmann::json::object()));
  f.push_back(Field::string("spec.optimizer.name", "The optimizer.").one_of({"adamw", "sgd"}).with_default("adamw"));
  f.push_back(Field::number("spec.optimizer.lr", "The peak learning rate.").above(0).with_default(0.001));
  f.push_back(Field::number("spec.optimizer.weightDecay", "Decoupled weight decay.").at_least(0).with_default(0));
  f.push_back(Field::integer("spec.optimizer.warmupSteps", "Linear warm-up steps.").at_least(0).with_default(0));
  f.push_back(Field::number("spec.optimizer.gradClip", "Global gradient-norm clip (0: none).").at_least(0).with_default(0));
  f.push_back(Field::string("spec.optimizer.schedule", "The learning-rate schedule after warm-up.")
                  .one_of({"constant", "cosine"})
                  .with_default("cosine"));

  f.push_back(Field::integer("spec.steps", "Training steps. Set exactly one of steps or epochs.").at_least(1));
  f.push_back(Field::number("spec.epochs", "Training epochs (may be fractional). Set exactly one of steps or epochs.").above(0));
  f.push_back(Field::integer("spec.globalBatch", "Samples per step over all ranks; the plan splits it.").at_least(1).with_default(128));
  f.push_back(Field::integer("spec.seed", "The random seed (initialization, data order).").at_least(0).with_default(1));
  f.push_back(Field::integer("spec.evalLimit", "Test samples per evaluation (0: the whole test set).").at_least(0).with_default(0));
  f.push_back(Field::integer("spec.evalEvery", "Evaluate every this many steps too (0: at the end only).").at_least(0).with_default(0));

  f.push_back(Field::object("spec.checkpoint", "Where and how often to checkpoint; restarts resume from the last one.")
                  .with_default(nlohmann::json::object()));
  f.push_back(Field::string("spec.checkpoint.dir", "The checkpoint directory (inside the volume when one is set).").non_empty());
  f.push_back(Field::object("spec.checkpoint.volume", "A PersistentVolumeClaim for checkpoints."));
  f.push_back(Field::string("spec.checkpoint.volume.claimName", "The PersistentVolumeClaim's name.").mandatory().non_empty());
  f.push_back(Field::integer("spec.checkpoint.intervalSteps", "Checkpoint every this many steps (0: never).")
                  .at_least(0)
                  .with_default(100));
  f.push_back(Field::integer("spec.checkpoint.keep",
                             "Checkpoints kept (the newest first); a resume falls back to an older one when the newest "
                             "is damaged. The volume must hold keep + 1 of them while one is written.")
                  .at_least(1)
                  .with_default(2));

  f.push_back(Field::string("spec.image", "The worker image.").non_empty().with_default("ghcr.io/qsync/qsync-worker:0.1.0"));
  f.push_back(Field::string("spec.imagePullPolicy", "The workers' image pull policy.").one_of({"Always", "IfNotPresent", "Never"}));
  f.push_back(Field::object("spec.resources", "Extra resources for each worker pod's container (GPUs come from gpusPerRank)."));
  f.push_back(Field::quantity_map("spec.resources.requests", "Resource requests, e.g. {cpu: \"4\", memory: 16Gi}."));
  f.push_back(Field::quantity_map("spec.resources.limits", "Resource limits, e.g. {memory: 32Gi}."));
  add_pod_template_fields(f, "spec.podTemplate");  // planner/job_pod_template.h

  add_elastic_policy_fields(f);  // planner/job_borrow_spec.h
  f.push_back(Field::object("spec.pool", "The devices: training and inference nodes for the operator, local workers for `qsync run`."));
  f.push_back(Field::array("spec.pool.training", "Training nodes, chosen by node selector."));
  add_pool_entry_fields(f, "spec.pool.training[]", false);
  f.push_back(Field::array("spec.pool.inference", "Inference nodes lent to training, chosen by node selector."));
  add_pool_entry_fields(f, "spec.pool.inference[]", true);
  f.push_back(Field::array("spec.pool.local", "Local worker processes, for `qsync run` only; the operator ignores them."));
  f.push_back(Field::string("spec.pool.local[].name", "The worker's name.").non_empty());
  f.push_back(Field::string("spec.pool.local[].deviceClass", "The device class the worker runs as (e.g. cpu-avx2).")
                  .mandatory()
                  .non_empty());
  f.push_back(Field::integer("spec.pool.local[].threads", "CPU threads.").at_least(1).with_default(1));
  f.push_back(Field::string("spec.pool.local[].memoryBudget", "Memory the worker may use, as a quantity (e.g. 2Gi).")
                  .matching(QUANTITY_PATTERN, "a quantity such as 2Gi or 512Mi"));
  f.push_back(Field::string("spec.pool.local[].precision", "Overrides planning.precision for this worker.").one_of(precisions));
  f.push_back(Field::integer("spec.pool.local[].localBatch", "The worker's batch (0: the global batch split evenly).")
                  .at_least(0)
                  .with_default(0));

  f.push_back(Field::object("spec.planning", "How the planner assigns per-rank precisions and batches.")
                  .with_default(nlohmann::json::object()));
  f.push_back(Field::string("spec.planning.allocator", "The allocation strategy.")
                  .one_of(allocator_strategies())
                  .with_default("exact"));
  f.push_back(Field::string("spec.planning.precision", "The training devices' precision.").one_of(precisions).with_default("fp32"));
  f.push_back(Field::string("spec.planning.lowPrecision", "The weak ranks' precision (uniform-low-weak).")
                  .one_of(precisions)
                  .with_default("int8"));
  f.push_back(Field::string("spec.planning.stepTimeTarget", "The step time to plan for (default: the training devices').")
                  .matching(DURATION_PATTERN, "a duration such as 250ms, 1.5s or 2m"));
  f.push_back(Field::string("spec.planning.indicator", "The precision-sensitivity indicator.")
                  .one_of({"bidirectional", "weight-error"})
                  .with_default("bidirectional"));
  f.push_back(Field::boolean("spec.planning.batchMoves", "Let the allocator move batch between ranks: off the ranks that cannot keep pace, and off quantized ranks when that buys back precision.").with_default(true));
  f.push_back(Field::string("spec.planning.profiles",
                            "Device and communication profiles: a name prefix of the labelled profile ConfigMaps "
                            "(qsync.dev/device-profile, qsync.dev/comm-profile) the operator plans with (only those; "
                            "default: every one in the namespace), or a directory (`qsync run`).")
                  .non_empty());
  f.push_back(Field::string("spec.planning.calibration", "A calibration stats file (`qsync run`).").non_empty());

  f.push_back(Field::object("spec.runPolicy", "Restarts, deadlines, cleanup and suspension, counted per job.")
                  .with_default(nlohmann::json::object()));
  f.push_back(Field::integer("spec.runPolicy.backoffLimit", "Whole-job restarts from the last checkpoint before the job fails.")
                  .at_least(0)
                  .with_default(3));
  f.push_back(Field::integer("spec.runPolicy.activeDeadlineSeconds", "Fail the job after running this long.").at_least(1));
  f.push_back(Field::integer("spec.runPolicy.ttlSecondsAfterFinished", "Delete the finished job after this long.").at_least(0));
  f.push_back(Field::string("spec.runPolicy.cleanPodPolicy", "Which pods to delete when the job finishes.")
                  .one_of({"None", "Running", "All"})
                  .with_default("Running"));
  f.push_back(Field::boolean("spec.runPolicy.suspend", "Stop the pods after a checkpoint; false resumes from it.").with_default(false));
  f.push_back(Field::string("spec.runPolicy.managedBy",
                            "The controller that reconciles the job: this operator, or Kueue's MultiKueue (the "
                            "operator then leaves it alone). Immutable.")
                  .one_of({JOB_DEFAULT_MANAGER, "kueue.x-k8s.io/multikueue"})
                  .with_rule("self == oldSelf", "managedBy is immutable")
                  .with_default(JOB_DEFAULT_MANAGER));
  add_scheduling_policy_fields(f);  // planner/job_scheduling_policy.h
  return f;
}

}  // namespace

Field Field::string(std::string path, std::string description) { return make(std::move(path), FieldType::STRING, std::move(description)); }
Field Field::integer(std::string path, std::string description) { return make(std::move(path), FieldType::INTEGER, std::move(description)); }
Field Field::number(std::string path, std::string description) { return make(std::move(path), FieldType::NUMBER, std::move(description)); }
Field Field::boolean(std::string path, std::string description) { return make(std::move(path), FieldType::BOOLEAN, std::move(description)); }
Field Field::date_time(std::string path, std::string description) { return make(std::move(path), FieldType::DATE_TIME, std::move(description)); }
Field Field::object(std::string path, std::string description) { return make(std::move(path), FieldType::OBJECT, std::move(description)); }
Field Field::array(std::string path, std::string description) { return make(std::move(path), FieldType::ARRAY, std::move(description)); }
Field Field::string_map(std::string path, std::string description) { return make(std::move(path), FieldType::STRING_MAP, std::move(description)); }
Field Field::quantity_map(std::string path, std::string description) { return make(std::move(path), FieldType::QUANTITY_MAP, std::move(description)); }

Field Field::with_default(nlohmann::json value) && { default_value = std::move(value); return std::move(*this); }
Field Field::one_of(std::vector<std::string> values) && { allowed = std::move(values); return std::move(*this); }
Field Field::at_least(double value) && { minimum = value; exclusive_minimum = false; return std::move(*this); }
Field Field::above(double value) && { minimum = value; exclusive_minimum = true; return std::move(*this); }
Field Field::non_empty() && { min_length = 1; return std::move(*this); }
Field Field::matching(std::string regex, std::string hint) && {
  pattern = std::move(regex);
  format_hint = std::move(hint);
  return std::move(*this);
}
Field Field::mandatory() && { required = true; return std::move(*this); }
Field Field::with_rule(std::string cel, std::string message) && {
  rules.emplace_back(std::move(cel), std::move(message));
  return std::move(*this);
}
Field Field::keyed_by(std::vector<std::string> keys) && { list_map_keys = std::move(keys); return std::move(*this); }
Field Field::open() && { open_object = true; return std::move(*this); }

const std::vector<Field>& job_spec_fields() {
  static const std::vector<Field> fields = build_spec_fields();
  return fields;
}

}  // namespace qsync
