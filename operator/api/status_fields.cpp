// File: operator/api/status_fields.cpp
// The HybridTrainingJob status field table (status_fields.h).
#include "operator/api/status_fields.h"

namespace qsync::api {
namespace {

std::vector<Field> build_status_fields() {
  std::vector<Field> f;
  f.push_back(Field::string("status.phase", "The job's phase.")
                  .one_of({"Pending", "Planning", "Running", "Restarting", "Resizing", "Waiting", "Suspended", "Succeeded",
                           "Failed"}));
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
  // Kueue: what the job's pods need, per pool entry, so a queue can reserve quota before admitting it.
  f.push_back(Field::array("status.podSets", "The job's pod sets (one per pool entry) for Kueue's quota.").keyed_by({"name"}));
  f.push_back(Field::string("status.podSets[].name", "The pool entry.").mandatory().non_empty());
  f.push_back(Field::integer("status.podSets[].count", "Its worker pods.").at_least(0));
  f.push_back(Field::quantity_map("status.podSets[].requests", "What each pod requests (cpu, memory, nvidia.com/gpu)."));
  // Off-peak borrowing and the elastic world size (docs/borrowing.md).
  f.push_back(Field::integer("status.borrowedDevices", "GPUs the job borrows from inference workloads now.").at_least(0));
  f.push_back(Field::integer("status.resizes", "Elastic resizes so far (checkpoint, re-plan, restart at the new size).")
                  .at_least(0));
  f.push_back(Field::object("status.lastResize", "The last resize."));
  f.push_back(Field::date_time("status.lastResize.time", "When it began."));
  f.push_back(Field::string("status.lastResize.reason", "PoolGrew, PoolShrank or BelowMinRanks."));
  f.push_back(Field::string("status.lastResize.message", "What changed in the pool."));
  f.push_back(Field::integer("status.lastResize.fromRanks", "The world size before.").at_least(0));
  f.push_back(Field::integer("status.lastResize.toRanks", "The world size after (0: waiting).").at_least(0));
  f.push_back(Field::integer("status.lastResize.checkpointStep", "The last checkpoint reported when it began.").at_least(0));
  f.push_back(Field::array("status.lending", "Per borrowing entry: the workload's lending state.").keyed_by({"entry"}));
  f.push_back(Field::string("status.lending[].entry", "The pool entry.").mandatory().non_empty());
  f.push_back(Field::string("status.lending[].workload", "The workload, KIND/NAME."));
  f.push_back(Field::string("status.lending[].state", "Serving, ScalingIn, Lent, Reclaiming or Unavailable."));
  f.push_back(Field::string("status.lending[].reason", "Why: Lending, Cooldown, WindowClosed, DemandHigh, DemandUnknown, ..."));
  f.push_back(Field::string("status.lending[].message", "What it means, and what to do."));
  for (const char* name : {"servingReplicas", "targetReplicas", "readyReplicas", "neededReplicas", "borrowedDevices",
                           "reclaimTargetReplicas", "reclaims", "reclaimsMissed"})
    f.push_back(Field::integer(std::string("status.lending[].") + name, std::string("Lending: ") + name + ".").at_least(0));
  f.push_back(Field::number("status.lending[].demand", "The last demand sample."));
  f.push_back(Field::date_time("status.lending[].lastChangeTime", "When the operator last changed the workload's replicas."));
  f.push_back(Field::date_time("status.lending[].reclaimStartTime", "When the reclaim in progress began."));
  f.push_back(Field::string("status.lending[].reclaimReason", "What triggered the reclaim in progress."));
  f.push_back(Field::number("status.lending[].lastReclaimSeconds", "Trigger to replicas Ready, the last reclaim.").at_least(0));
  return f;
}

}  // namespace

const std::vector<Field>& hybrid_training_job_status_fields() {
  static const std::vector<Field> fields = build_status_fields();
  return fields;
}

}  // namespace qsync::api
