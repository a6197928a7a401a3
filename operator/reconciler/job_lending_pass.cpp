// File: operator/reconciler/job_lending_pass.cpp
// The lending part of a reconcile pass (see job_reconciler.h): observe each borrowed workload,
// its pods, the nodes' GPUs and the demand; decide (operator/lending); remember the decision in
// status.lending before scaling the workload (so a reclaim's start survives a crash); emit
// Events and metrics; and give the workloads back when the job ends.
#include <cmath>

#include "operator/controller/micro_time.h"
#include "operator/reconciler/borrow_observation.h"
#include "operator/reconciler/job_reconcile_pass.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

const kube::ResourceType& workload_type(const std::string& kind) {
  return kind == "StatefulSet" ? kube::stateful_sets_type() : kube::deployments_type();
}

std::string workload_text(const BorrowSource& s, const std::optional<json>& w) {
  return s.kind + "/" + (w ? (*w)["metadata"].value("name", "") : s.name.empty() ? "(selector)" : s.name);
}

double time_or_zero(const std::string& t) {
  if (t.empty()) return 0;
  try {
    return kube::kube_time_parse(t);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string micro(double t) {
  if (t <= 0) return "";
  return controller::micro_time_format(std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(t))));
}

const api::LendingStatus* lending_status_of(const api::HybridTrainingJobStatus& s, const std::string& entry) {
  for (const api::LendingStatus& l : s.lending)
    if (l.entry == entry) return &l;
  return nullptr;
}

lending::LendingMemory memory_of(const api::LendingStatus* l) {
  lending::LendingMemory m;
  if (l == nullptr) return m;
  m.state = l->state;
  m.last_change = time_or_zero(l->last_change_time);
  m.reclaim_started = time_or_zero(l->reclaim_start_time);
  m.reclaim_target = l->reclaim_target_replicas;
  m.reclaim_reason = l->reclaim_reason;
  return m;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// The merge patch that makes the workload what the decision says (null: nothing to write).
json workload_patch(const json& w, const lending::LendingDecision& d, const std::string& job) {
  const int64_t replicas = w["spec"].value("replicas", int64_t(1));
  json annotations = json::object();
  auto want = [&](const char* key, const std::string& value) {
    if (annotation_of(w, key) != value) annotations[key] = value.empty() ? json(nullptr) : json(value);
  };
  const bool lent = d.serving_replicas > 0;
  want(SERVING_REPLICAS_ANNOTATION, lent ? std::to_string(d.serving_replicas) : "");
  want(LENDING_REPLICAS_ANNOTATION, lent ? std::to_string(d.target_replicas) : "");
  want(LENT_TO_ANNOTATION, lent ? job : "");
  if (annotations.empty() && d.target_replicas == replicas) return nullptr;
  json patch = {{"metadata", {{"resourceVersion", w["metadata"].value("resourceVersion", "")}}}};
  if (!annotations.empty()) patch["metadata"]["annotations"] = annotations;
  if (d.target_replicas != replicas) patch["spec"] = {{"replicas", d.target_replicas}};
  return patch;
}

}  // namespace

std::optional<json> JobReconciler::find_workload(const std::string& ns, const BorrowSource& s, std::string& problem) {
  if (!s.name.empty()) {
    std::optional<json> w = reader_.workload(ns, s.kind, s.name);
    if (!w) problem = s.kind + " " + ns + "/" + s.name + " does not exist (" + s.path + ".workload)";
    return w;
  }
  std::vector<json> matching;
  for (json& w : reader_.workloads(ns, s.kind)) {
    const json labels = w["metadata"].value("labels", json::object());
    bool all = true;
    for (const auto& [k, v] : s.selector) all = all && labels.contains(k) && labels[k] == v;
    if (all) matching.push_back(std::move(w));
  }
  if (matching.size() == 1) return matching[0];
  problem = std::to_string(matching.size()) + " " + s.kind + "s in namespace " + ns + " match " + s.path +
            ".workload.selector; it must select exactly one";
  return std::nullopt;
}

namespace {

// What the lending decision of a borrow entry starts from: its workload as observed, its demand
// sample (from the entry's Prometheus, else the operator's), the nodes and GPUs it may give.
lending::BorrowEntry borrow_entry(const BorrowSource& s, const std::optional<json>& w, const std::vector<json>& pods,
                                  const std::string& job, const std::vector<json>& nodes,
                                  const api::HybridTrainingJobStatus& old_status, double now,
                                  const std::string& operator_prometheus_url, lending::DemandSource& demand) {
  lending::BorrowEntry e;
  e.entry = s.entry;
  e.policy = &s.policy;
  e.workload = observe_workload(w ? *w : json(), pods, job);
  e.memory = memory_of(lending_status_of(old_status, s.entry));
  if (s.policy.demand) {
    const std::string url = s.prometheus_url.empty() ? operator_prometheus_url : s.prometheus_url;
    if (url.empty()) {
      e.demand = lending::DemandSample{false, 0, now, "no Prometheus to ask: set " + s.path +
                                                          ".demand.prometheus.url or run qsync-operator with --prometheus-url"};
    } else {
      e.demand = demand.sample(url, s.prometheus_query);
    }
  }
  e.nodes = matching_node_names(s.node_selector, nodes);
  e.gpus_per_replica = w ? std::max<int64_t>(1, workload_gpus_per_replica(*w)) : 1;
  e.gpus_per_rank = s.gpus_per_rank;
  e.max_ranks = s.max_ranks;
  return e;
}

// The entry's status.lending[] after the decision; the times and counts it keeps from `before`
// where the decision left them as they were. `problem`: why its workload was not found.
api::LendingStatus lending_status_after(const BorrowSource& s, const std::string& workload,
                                        const lending::BorrowEntry& e, const lending::LendingDecision& d,
                                        const api::LendingStatus* before, const std::string& problem) {
  api::LendingStatus l;
  l.entry = s.entry;
  l.workload = workload;
  l.state = d.memory.state;
  l.reason = d.reason;
  l.message = problem.empty() ? d.message : problem;
  l.serving_replicas = d.serving_replicas > 0 ? d.serving_replicas : e.workload.replicas;
  l.target_replicas = d.target_replicas;
  l.ready_replicas = e.workload.ready_replicas;
  l.needed_replicas = d.needed_replicas;
  l.borrowed_devices = before != nullptr ? before->borrowed_devices : 0;  // set from the placement later
  if (e.demand && e.demand->ok) l.demand = e.demand->value;
  l.last_change_time = d.memory.last_change == e.memory.last_change && before != nullptr ? before->last_change_time
                                                                                         : micro(d.memory.last_change);
  l.reclaim_start_time = d.memory.reclaim_started == e.memory.reclaim_started && before != nullptr
                             ? before->reclaim_start_time
                             : micro(d.memory.reclaim_started);
  l.reclaim_target_replicas = d.memory.reclaim_target;
  l.reclaim_reason = d.memory.reclaim_reason;
  l.reclaims = before != nullptr ? before->reclaims : 0;
  l.reclaims_missed = before != nullptr ? before->reclaims_missed : 0;
  l.last_reclaim_seconds = before != nullptr ? before->last_reclaim_seconds : std::nullopt;
  return l;
}

}  // namespace

PoolCapacity JobReconciler::lend(Pass& p) {
  const double now = this->now();
  const std::vector<json> pods = reader_.all_pods();
  std::vector<lending::BorrowEntry> entries;
  std::vector<std::optional<json>> workloads;
  std::vector<std::string> problems;
  for (const BorrowSource& s : p.sources) {
    std::string problem;
    workloads.push_back(find_workload(p.ns, s, problem));
    problems.push_back(problem);
    entries.push_back(borrow_entry(s, workloads.back(), pods, p.name, p.nodes, p.old_status, now,
                                   options_.prometheus_url, demand_source()));
  }
  const std::map<std::string, int64_t> free = lending::free_gpus(observe_nodes(p.nodes), observe_pods(pods, p.uid));
  const std::vector<lending::BorrowPlan> plans = lending::plan_borrowing(entries, free, now);

  // Remember first, then scale: a reclaim's start and the cooldown survive a failed write.
  std::vector<api::LendingStatus> lending;
  std::vector<std::pair<size_t, json>> patches;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const BorrowSource& s = p.sources[i];
    const lending::LendingDecision& d = plans[i].decision;
    api::LendingStatus l = lending_status_after(s, workload_text(s, workloads[i]), entries[i], d,
                                                lending_status_of(p.old_status, s.entry), problems[i]);
    record_lending_events(p, s, entries[i].workload.replicas, d, l);
    const std::string holder = workloads[i] ? annotation_of(*workloads[i], LENT_TO_ANNOTATION) : "";
    if (!holder.empty() && holder != p.name) {
      l.reason = "LentToAnotherJob";
      l.message = l.workload + " is lent to HybridTrainingJob " + holder + " (annotation " + LENT_TO_ANNOTATION +
                  "); a workload lends to one job at a time";
    } else if (workloads[i]) {
      json patch = workload_patch(*workloads[i], d, p.name);
      if (!patch.is_null()) patches.emplace_back(i, std::move(patch));
    }
    lending.push_back(std::move(l));
  }
  p.status.lending = lending;
  if (!patches.empty()) write_status(p);
  for (const auto& [i, patch] : patches) {
    const json& w = *workloads[i];
    client_.patch_merge(workload_type(p.sources[i].kind), p.ns, w["metadata"].value("name", ""), patch);  // Conflict: requeue
  }
  return pool_capacity(p.sources, plans, free, p.bounds.max_ranks);
}

void JobReconciler::record_lending_events(Pass& p, const BorrowSource& s, int64_t replicas,
                                          const lending::LendingDecision& d, api::LendingStatus& l) {
  const std::string& what = l.workload;
  if (d.lend_started)
    record(p, "Normal", "Lending",
           "scaling " + what + " in from " + std::to_string(replicas) + " to " + std::to_string(d.target_replicas) +
               " replicas (demand needs " + std::to_string(d.needed_replicas) +
               "): their GPUs go to the job once the pods are gone");
  if (d.reclaim_started)
    record(p, "Normal", "Reclaiming",
           "reclaiming " + what + " (" + *d.reclaim_started + "): scaling out from " + std::to_string(replicas) +
               " to " + std::to_string(d.target_replicas) + " replicas; the job shrinks to the devices it keeps" +
               (d.message.empty() ? "" : "; " + d.message));
  if (d.reclaim_finished) {
    const lending::FinishedReclaim& f = *d.reclaim_finished;
    ++l.reclaims;
    if (!f.within_grace) ++l.reclaims_missed;
    l.last_reclaim_seconds = std::round(f.seconds * 1000) / 1000;
    record(p, f.within_grace ? "Normal" : "Warning", f.within_grace ? "Reclaimed" : "ReclaimMissedGrace",
           what + " is back to " + std::to_string(f.replicas) + " Ready replicas " + seconds_text(f.seconds) +
               " s after the reclaim began (" + f.reason + "; reclaimGraceSeconds " +
               std::to_string(int64_t(s.policy.reclaim_grace_seconds)) + (f.within_grace ? ")" : ", missed)"));
    if (metrics_ != nullptr) metrics_->reclaim_finished(f.reason, f.seconds, f.within_grace);
  }
}

void JobReconciler::return_borrowed(Pass& p, const std::string& why) {
  for (const BorrowSource& s : p.sources) {
    std::string problem;
    const std::optional<json> w = find_workload(p.ns, s, problem);
    if (!w || annotation_of(*w, LENT_TO_ANNOTATION) != p.name) continue;
    const std::string serving = annotation_of(*w, SERVING_REPLICAS_ANNOTATION);
    json patch = {{"metadata",
                   {{"resourceVersion", (*w)["metadata"].value("resourceVersion", "")},
                    {"annotations",
                     {{SERVING_REPLICAS_ANNOTATION, nullptr}, {LENDING_REPLICAS_ANNOTATION, nullptr}, {LENT_TO_ANNOTATION, nullptr}}}}}};
    int64_t replicas = 0;
    try {
      replicas = serving.empty() ? 0 : std::stoll(serving);
    } catch (const std::exception&) {
      replicas = 0;
    }
    if (replicas > 0) patch["spec"] = {{"replicas", replicas}};
    client_.patch_merge(workload_type(s.kind), p.ns, (*w)["metadata"].value("name", ""), patch);
    record(p, "Normal", "Returned",
           workload_text(s, w) + " gets its " + (replicas > 0 ? std::to_string(replicas) + " " : std::string()) +
               "serving replicas back: " + why);
  }
  for (api::LendingStatus& l : p.status.lending) {
    l.state = lending::STATE_SERVING;
    l.reason = "Returned";
    l.message = why;
    l.borrowed_devices = 0;
    l.reclaim_start_time.clear();
    l.reclaim_target_replicas = 0;
  }
  p.status.borrowed_devices = 0;
  if (metrics_ != nullptr) metrics_->set_borrowed_devices(p.ns, p.name, 0);
}

}  // namespace qsync::reconciler
