// File: operator/api/hybrid_training_job_status.cpp
// .status <-> HybridTrainingJobStatus, checked against the status fields of the table.
#include "operator/api/hybrid_training_job_status.h"

#include <stdexcept>

#include "operator/api/status_fields.h"
#include "planner/job_field_validation.h"
#include "planner/json_access.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;

}  // namespace

HybridTrainingJobStatus hybrid_training_job_status_from_json(const json& status) {
  HybridTrainingJobStatus s;
  if (status.is_null()) return s;
  const std::vector<std::string> problems = field_problems(hybrid_training_job_status_fields(), "status", status);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw std::invalid_argument("invalid status: " + all);
  }
  s.phase = json_text(status, "phase");
  s.message = json_text(status, "message");
  s.observed_generation = json_integer(status, "observedGeneration");
  for (const json& c : status.value("conditions", json::array()))
    s.conditions.push_back({json_text(c, "type"), json_text(c, "status"), json_text(c, "reason"), json_text(c, "message"),
                            json_text(c, "lastTransitionTime"), json_integer(c, "observedGeneration")});
  if (status.contains("plan")) {
    const json& p = status["plan"];
    PlanSummary plan;
    plan.strategy = json_text(p, "strategy");
    plan.predicted_step_seconds = json_number(p, "predictedStepSeconds");
    plan.step_time_target_seconds = json_number(p, "stepTimeTargetSeconds");
    plan.config_map = json_text(p, "configMap");
    for (const json& r : p.value("ranks", json::array()))
      plan.ranks.push_back({json_integer(r, "rank"), json_text(r, "node"), json_text(r, "deviceClass"), json_text(r, "precisionMix"),
                            json_integer(r, "localBatch"), json_number(r, "predictedStepSeconds")});
    s.plan = plan;
  }
  const json replicas = status.value("replicas", json::object());
  s.replicas = {json_integer(replicas, "total"), json_integer(replicas, "active"), json_integer(replicas, "succeeded"),
                json_integer(replicas, "failed")};
  s.restarts = json_integer(status, "restarts");
  s.last_checkpoint_step = json_integer(status, "lastCheckpointStep");
  s.start_time = json_text(status, "startTime");
  s.completion_time = json_text(status, "completionTime");
  s.borrowed_devices = json_integer(status, "borrowedDevices");
  s.resizes = json_integer(status, "resizes");
  if (status.contains("lastResize")) {
    const json& r = status["lastResize"];
    s.last_resize = ResizeStatus{json_text(r, "time"), json_text(r, "reason"), json_text(r, "message"),
                                 json_integer(r, "fromRanks"), json_integer(r, "toRanks"), json_integer(r, "checkpointStep")};
  }
  for (const json& ps : status.value("podSets", json::array())) {
    PodSetStatus set{json_text(ps, "name"), json_integer(ps, "count"), {}};
    const json requests = ps.value("requests", json::object());
    for (const auto& [k, v] : requests.items()) set.requests[k] = v.is_string() ? v.get<std::string>() : v.dump();
    s.pod_sets.push_back(std::move(set));
  }
  for (const json& l : status.value("lending", json::array())) {
    LendingStatus e;
    e.entry = json_text(l, "entry");
    e.workload = json_text(l, "workload");
    e.state = json_text(l, "state");
    e.reason = json_text(l, "reason");
    e.message = json_text(l, "message");
    e.serving_replicas = json_integer(l, "servingReplicas");
    e.target_replicas = json_integer(l, "targetReplicas");
    e.ready_replicas = json_integer(l, "readyReplicas");
    e.needed_replicas = json_integer(l, "neededReplicas");
    e.borrowed_devices = json_integer(l, "borrowedDevices");
    if (l.contains("demand")) e.demand = json_number(l, "demand");
    e.last_change_time = json_text(l, "lastChangeTime");
    e.reclaim_start_time = json_text(l, "reclaimStartTime");
    e.reclaim_target_replicas = json_integer(l, "reclaimTargetReplicas");
    e.reclaim_reason = json_text(l, "reclaimReason");
    e.reclaims = json_integer(l, "reclaims");
    e.reclaims_missed = json_integer(l, "reclaimsMissed");
    if (l.contains("lastReclaimSeconds")) e.last_reclaim_seconds = json_number(l, "lastReclaimSeconds");
    s.lending.push_back(std::move(e));
  }
  return s;
}

json to_json(const HybridTrainingJobStatus& s) {
  json out = json::object();
  put_text(out, "phase", s.phase);
  put_text(out, "message", s.message);
  out["observedGeneration"] = s.observed_generation;
  out["conditions"] = json::array();
  for (const Condition& c : s.conditions)
    out["conditions"].push_back({{"type", c.type},
                                 {"status", c.status},
                                 {"reason", c.reason},
                                 {"message", c.message},
                                 {"lastTransitionTime", c.last_transition_time},
                                 {"observedGeneration", c.observed_generation}});
  if (s.plan) {
    json plan = {{"predictedStepSeconds", s.plan->predicted_step_seconds},
                 {"stepTimeTargetSeconds", s.plan->step_time_target_seconds},
                 {"ranks", json::array()}};
    put_text(plan, "strategy", s.plan->strategy);
    put_text(plan, "configMap", s.plan->config_map);
    for (const RankPlan& r : s.plan->ranks) {
      json rank = {{"rank", r.rank}, {"localBatch", r.local_batch}, {"predictedStepSeconds", r.predicted_step_seconds}};
      put_text(rank, "node", r.node);
      put_text(rank, "deviceClass", r.device_class);
      put_text(rank, "precisionMix", r.precision_mix);
      plan["ranks"].push_back(rank);
    }
    out["plan"] = plan;
  }
  out["replicas"] = {{"total", s.replicas.total},
                     {"active", s.replicas.active},
                     {"succeeded", s.replicas.succeeded},
                     {"failed", s.replicas.failed}};
  out["restarts"] = s.restarts;
  out["lastCheckpointStep"] = s.last_checkpoint_step;
  put_text(out, "startTime", s.start_time);
  put_text(out, "completionTime", s.completion_time);
  if (s.borrowed_devices > 0) out["borrowedDevices"] = s.borrowed_devices;
  if (s.resizes > 0) out["resizes"] = s.resizes;
  if (s.last_resize) {
    json r = {{"fromRanks", s.last_resize->from_ranks},
              {"toRanks", s.last_resize->to_ranks},
              {"checkpointStep", s.last_resize->checkpoint_step}};
    put_text(r, "time", s.last_resize->time);
    put_text(r, "reason", s.last_resize->reason);
    put_text(r, "message", s.last_resize->message);
    out["lastResize"] = r;
  }
  for (const PodSetStatus& ps : s.pod_sets) {
    json set = {{"name", ps.name}, {"count", ps.count}};
    if (!ps.requests.empty()) set["requests"] = ps.requests;
    out["podSets"].push_back(set);
  }
  if (!s.lending.empty()) {
    out["lending"] = json::array();
    for (const LendingStatus& l : s.lending) {
      json e = {{"entry", l.entry},
                {"servingReplicas", l.serving_replicas},
                {"targetReplicas", l.target_replicas},
                {"readyReplicas", l.ready_replicas},
                {"neededReplicas", l.needed_replicas},
                {"borrowedDevices", l.borrowed_devices},
                {"reclaimTargetReplicas", l.reclaim_target_replicas},
                {"reclaims", l.reclaims},
                {"reclaimsMissed", l.reclaims_missed}};
      for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"workload", &l.workload},
                                       {"state", &l.state},
                                       {"reason", &l.reason},
                                       {"message", &l.message},
                                       {"lastChangeTime", &l.last_change_time},
                                       {"reclaimStartTime", &l.reclaim_start_time},
                                       {"reclaimReason", &l.reclaim_reason}})
        put_text(e, key, *value);
      if (l.demand) e["demand"] = *l.demand;
      if (l.last_reclaim_seconds) e["lastReclaimSeconds"] = *l.last_reclaim_seconds;
      out["lending"].push_back(e);
    }
  }
  return out;
}

}  // namespace qsync::api
