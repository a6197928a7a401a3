// File: operator/api/status_fields.cpp
// The HybridTrainingJob status field table (status_fields.h).
#include "operator/api/status_fields.h"

namespace qsync::api {
namespace {

std::vector<Field> build_status_fields() {
  std::vector<Field> f;
  f.push_back(Field::string("status.phase", "The job's phase.")
                  .one_of({"Pending", "Planning", "Running", "Restarting", "Suspended", "Succeeded", "Failed"}));
  f.push_back(Field::string("status.message", "A human-readable summary of the phase: what happened, what to fix."));
  f.push_back(Field::integer("status.observedGeneration", "The spec generation this status describes.").at_least(0));
  f.push_back(Field::array("status.conditions", "Created, Planned, Running, Restarting, Suspended, Succeeded, Failed.")
                  .keyed_by({"type"}));
  f.push_back(Field::string("status.conditions[].type", "The condition's type.").mandatory().non_empty());
  f.push_back(Field::string("status.conditions[].status", "True, False or Unknown.").mandatory().one_of({"True", "False", "Unknown"}));
  f.push_back(Field::string("status.conditions[].reason", "A CamelCase reason for the last transition.").mandatory());
  f.push_back(Field::string("status.conditions[].message", "Details of the last transition.").mandatory());
  f.push_back(Field::date_time("status.conditions[].lastTransitionTime", "When the status last changed.").mandatory());
  f.push_back(Field::integer("status.conditions[].observedGeneration", "The generation the condition was set for.").at_least(0));
  f.push_back(Field::object("status.plan", "The planner's result."));
  f.push_back(Field::string("status.plan.strategy", "The allocator that made the plan."));
  f.push_back(Field::number("status.plan.predictedStepSeconds", "The predicted step time.").at_least(0));
  f.push_back(Field::number("status.plan.stepTimeTargetSeconds", "The step time the plan was made for.").at_least(0));
  f.push_back(Field::string("status.plan.configMap", "The ConfigMap holding the plan files."));
  f.push_back(Field::array("status.plan.ranks", "One entry per rank."));
  f.push_back(Field::integer("status.plan.ranks[].rank", "The rank.").at_least(0));
  f.push_back(Field::string("status.plan.ranks[].node", "The node the rank runs on."));
  f.push_back(Field::string("status.plan.ranks[].deviceClass", "The rank's device class."));
  f.push_back(Field::string("status.plan.ranks[].precisionMix", "Layers per precision, e.g. \"fp32:4 int8:2\"."));
  f.push_back(Field::integer("status.plan.ranks[].localBatch", "The rank's share of the global batch.").at_least(0));
  f.push_back(Field::number("status.plan.ranks[].predictedStepSeconds", "The rank's predicted compute time per step.").at_least(0));
  f.push_back(Field::object("status.replicas", "Worker pod counts."));
  for (const char* name : {"total", "active", "succeeded", "failed"})
    f.push_back(Field::integer(std::string("status.replicas.") + name, std::string("Pods: ") + name + ".").at_least(0));
  f.push_back(Field::integer("status.restarts", "Whole-job restarts so far (counted against backoffLimit).").at_least(0));
  f.push_back(Field::integer("status.lastCheckpointStep", "The step of the last checkpoint written.").at_least(0));
  f.push_back(Field::date_time("status.startTime", "When the workers started."));
  f.push_back(Field::date_time("status.completionTime", "When the job succeeded or failed."));
  return f;
}

}  // namespace

const std::vector<Field>& hybrid_training_job_status_fields() {
  static const std::vector<Field> fields = build_status_fields();
  return fields;
}

}  // namespace qsync::api
