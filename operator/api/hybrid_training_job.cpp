// File: operator/api/hybrid_training_job.cpp
// HybridTrainingJob <-> JSON: defaults and field checks from the table (field_validation.h), the
// cross-field rules, then plain reads of the validated object. Durations and memory quantities
// go through the local runner's parsers (planner/job_spec.h), so both accept the same values.
#include "operator/api/hybrid_training_job.h"

#include <set>
#include <stdexcept>

#include "operator/api/crd_fields.h"
#include "operator/api/field_validation.h"
#include "operator/api/json_access.h"
#include "planner/job_spec.h"

namespace qsync::api {
namespace {

using json = nlohmann::json;

// The rules the field table cannot state (the CRD states some as CEL, which only real API
// servers evaluate). `spec` has its defaults and passed the field checks.
void check_cross_field_rules(const json& spec, std::vector<std::string>& problems) {
  const json& model = spec["model"];
  const int sources = int(model.contains("zoo")) + int(model.contains("file")) + int(model.contains("configMap"));
  if (sources != 1)
    problems.push_back("spec.model: set exactly one of zoo (a zoo model name), file (a model file) or configMap, got " +
                       std::to_string(sources));
  if (spec.contains("data") && spec["data"].contains("path") && spec["data"].contains("volume"))
    problems.push_back("spec.data: set path or volume, not both");
  if (spec.contains("steps") && spec.contains("epochs"))
    problems.push_back("spec.steps and spec.epochs are both set: keep one (steps: 300, or epochs: 1.5)");
  if (!spec.contains("steps") && !spec.contains("epochs"))
    problems.push_back("set spec.steps or spec.epochs (how long to train, e.g. steps: 300)");
  const json pool = spec.value("pool", json::object());
  const size_t entries = pool.value("training", json::array()).size() + pool.value("inference", json::array()).size();
  if (entries == 0)
    problems.push_back(
        "spec.pool needs at least one training or inference entry for the operator (pool.local is for `qsync run` "
        "only), e.g. training: [{name: train, nodeSelector: {qsync.dev/pool: training}}]");
  std::set<std::string> names;
  for (const char* group : {"training", "inference"})
    for (const json& entry : pool.value(group, json::array()))
      if (entry.contains("name") && !names.insert(entry["name"].get<std::string>()).second)
        problems.push_back("spec.pool: the entry name \"" + entry["name"].get<std::string>() +
                           "\" is used twice; names must be unique over training and inference (they name the pods)");
}

// Runs a planner parser; its message becomes a problem instead of an exception.
template <class Parse>
auto checked(Parse parse, std::vector<std::string>& problems) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    problems.push_back(e.what());
    return {};
  }
}

std::map<std::string, std::string> string_map(const json& o) {
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : o.items()) out[key] = v.is_string() ? v.get<std::string>() : v.dump();
  return out;
}

std::optional<VolumeClaim> volume_from(const json& parent) {
  if (!parent.contains("volume")) return std::nullopt;
  return VolumeClaim{json_text(parent["volume"], "claimName"), json_text(parent["volume"], "path")};
}

PoolEntry pool_entry_from(const json& e, const std::string& where, std::vector<std::string>& problems) {
  PoolEntry p;
  p.name = json_text(e, "name");
  p.node_selector = string_map(e.value("nodeSelector", json::object()));
  p.count = json_integer(e, "count");
  p.device_class = json_text(e, "deviceClass");
  p.memory_budget = json_text(e, "memoryBudget");
  if (!p.memory_budget.empty())
    p.memory_budget_bytes = checked([&] { return parse_memory_quantity(p.memory_budget, where + ".memoryBudget"); }, problems);
  if (e.contains("gpusPerRank")) p.gpus_per_rank = json_integer(e, "gpusPerRank");
  p.off_peak_only = json_flag(e, "offPeakOnly");
  return p;
}

LocalWorker local_worker_from(const json& e, const std::string& where, std::vector<std::string>& problems) {
  LocalWorker w;
  w.name = json_text(e, "name");
  w.device_class = json_text(e, "deviceClass");
  w.threads = json_integer(e, "threads");
  w.memory_budget = json_text(e, "memoryBudget");
  if (!w.memory_budget.empty())
    w.memory_budget_bytes = checked([&] { return parse_memory_quantity(w.memory_budget, where + ".memoryBudget"); }, problems);
  w.precision = json_text(e, "precision");
  w.local_batch = json_integer(e, "localBatch");
  return w;
}

json volume_json(const VolumeClaim& v) {
  json out = {{"claimName", v.claim_name}};
  put_text(out, "path", v.path);
  return out;
}

json pool_entry_json(const PoolEntry& p, bool inference) {
  json out = {{"name", p.name}, {"count", p.count}};
  if (!p.node_selector.empty()) out["nodeSelector"] = p.node_selector;
  put_text(out, "deviceClass", p.device_class);
  put_text(out, "memoryBudget", p.memory_budget);
  if (p.gpus_per_rank) out["gpusPerRank"] = *p.gpus_per_rank;
  if (inference) out["offPeakOnly"] = p.off_peak_only;
  return out;
}

}  // namespace

std::string HybridTrainingJob::name() const { return metadata.value("name", ""); }
std::string HybridTrainingJob::namespace_name() const { return metadata.value("namespace", ""); }
int64_t HybridTrainingJob::generation() const { return metadata.value("generation", int64_t{0}); }

HybridTrainingJobSpec hybrid_training_job_spec_from_json(const json& input) {
  json spec = input;
  apply_field_defaults(hybrid_training_job_spec_fields(), "spec", spec);
  std::vector<std::string> problems = field_problems(hybrid_training_job_spec_fields(), "spec", spec);
  if (!problems.empty() || !spec.is_object()) {  // reads below assume the fields' types
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw std::invalid_argument("invalid spec: " + all);
  }
  check_cross_field_rules(spec, problems);

  HybridTrainingJobSpec s;
  const json& model = spec["model"];
  s.model.zoo = json_text(model, "zoo");
  s.model.file = json_text(model, "file");
  if (model.contains("configMap"))
    s.model.config_map = ConfigMapKey{json_text(model["configMap"], "name"), json_text(model["configMap"], "key")};
  const json data = spec.value("data", json::object());
  s.data.path = json_text(data, "path");
  s.data.volume = volume_from(data);
  const json& o = spec["optimizer"];
  s.optimizer = {json_text(o, "name"), json_number(o, "lr"), json_number(o, "weightDecay"), json_integer(o, "warmupSteps"),
                 json_number(o, "gradClip"), json_text(o, "schedule")};
  if (spec.contains("steps")) s.steps = json_integer(spec, "steps");
  if (spec.contains("epochs")) s.epochs = json_number(spec, "epochs");
  s.global_batch = json_integer(spec, "globalBatch");
  s.seed = json_integer(spec, "seed");
  s.eval_limit = json_integer(spec, "evalLimit");
  s.eval_every = json_integer(spec, "evalEvery");
  const json& c = spec["checkpoint"];
  s.checkpoint = {json_text(c, "dir"), volume_from(c), json_integer(c, "intervalSteps")};
  s.image = json_text(spec, "image");
  s.image_pull_policy = json_text(spec, "imagePullPolicy");
  if (spec.contains("resources"))
    s.resources = ResourceRequirements{string_map(spec["resources"].value("requests", json::object())),
                                       string_map(spec["resources"].value("limits", json::object()))};
  const json pool = spec.value("pool", json::object());
  for (const char* group : {"training", "inference"}) {
    const json entries = pool.value(group, json::array());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string where = std::string("spec.pool.") + group + "[" + std::to_string(i) + "]";
      (group == std::string("training") ? s.pool.training : s.pool.inference).push_back(pool_entry_from(entries[i], where, problems));
    }
  }
  const json local = pool.value("local", json::array());
  for (size_t i = 0; i < local.size(); ++i)
    s.pool.local.push_back(local_worker_from(local[i], "spec.pool.local[" + std::to_string(i) + "]", problems));
  const json& p = spec["planning"];
  s.planning.allocator = json_text(p, "allocator");
  s.planning.precision = json_text(p, "precision");
  s.planning.low_precision = json_text(p, "lowPrecision");
  s.planning.step_time_target = json_text(p, "stepTimeTarget");
  if (!s.planning.step_time_target.empty())
    s.planning.step_time_target_seconds = checked(
        [&] { return parse_duration_seconds(s.planning.step_time_target, "spec.planning.stepTimeTarget"); }, problems);
  s.planning.indicator = json_text(p, "indicator");
  s.planning.batch_moves = json_flag(p, "batchMoves", true);
  s.planning.profiles = json_text(p, "profiles");
  s.planning.calibration = json_text(p, "calibration");
  const json& r = spec["runPolicy"];
  s.run_policy.backoff_limit = json_integer(r, "backoffLimit");
  if (r.contains("activeDeadlineSeconds")) s.run_policy.active_deadline_seconds = json_integer(r, "activeDeadlineSeconds");
  if (r.contains("ttlSecondsAfterFinished")) s.run_policy.ttl_seconds_after_finished = json_integer(r, "ttlSecondsAfterFinished");
  s.run_policy.clean_pod_policy = json_text(r, "cleanPodPolicy");
  s.run_policy.suspend = json_flag(r, "suspend");
  s.run_policy.managed_by = json_text(r, "managedBy");

  if (!problems.empty()) {
    std::string all;
    for (const std::string& problem : problems) all += (all.empty() ? "" : "; ") + problem;
    throw std::invalid_argument("invalid spec: " + all);
  }
  return s;
}

HybridTrainingJob hybrid_training_job_from_json(const json& object) {
  if (!object.is_object()) throw std::invalid_argument("a HybridTrainingJob is a mapping, got " + object.dump());
  const std::string api_version = object.value("apiVersion", API_VERSION);
  const std::string kind = object.value("kind", KIND);
  if (api_version != API_VERSION || kind != KIND)
    throw std::invalid_argument("expected apiVersion " + std::string(API_VERSION) + " and kind " + KIND + ", got " +
                                api_version + " " + kind);
  HybridTrainingJob job;
  job.metadata = object.value("metadata", json::object());
  const std::string who = "HybridTrainingJob " + job.namespace_name() + (job.namespace_name().empty() ? "" : "/") + job.name();
  if (job.name().empty()) throw std::invalid_argument(who + ": metadata.name is missing (the job's name)");
  if (!object.contains("spec")) throw std::invalid_argument(who + ": spec is missing (what to train and on which pool)");
  try {
    job.spec = hybrid_training_job_spec_from_json(object["spec"]);
    if (object.contains("status") && !object["status"].is_null())
      job.status = hybrid_training_job_status_from_json(object["status"]);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(who + ": " + e.what());
  }
  return job;
}

json to_json(const HybridTrainingJobSpec& s) {
  json model = json::object();
  put_text(model, "zoo", s.model.zoo);
  put_text(model, "file", s.model.file);
  if (s.model.config_map) model["configMap"] = {{"name", s.model.config_map->name}, {"key", s.model.config_map->key}};
  json out = {{"model", model}};
  json data = json::object();
  put_text(data, "path", s.data.path);
  if (s.data.volume) data["volume"] = volume_json(*s.data.volume);
  if (!data.empty()) out["data"] = data;
  out["optimizer"] = {{"name", s.optimizer.name},         {"lr", s.optimizer.lr},
                      {"weightDecay", s.optimizer.weight_decay}, {"warmupSteps", s.optimizer.warmup_steps},
                      {"gradClip", s.optimizer.grad_clip}, {"schedule", s.optimizer.schedule}};
  if (s.steps) out["steps"] = *s.steps;
  if (s.epochs) out["epochs"] = *s.epochs;
  out["globalBatch"] = s.global_batch;
  out["seed"] = s.seed;
  out["evalLimit"] = s.eval_limit;
  out["evalEvery"] = s.eval_every;
  json checkpoint = {{"intervalSteps", s.checkpoint.interval_steps}};
  put_text(checkpoint, "dir", s.checkpoint.dir);
  if (s.checkpoint.volume) checkpoint["volume"] = volume_json(*s.checkpoint.volume);
  out["checkpoint"] = checkpoint;
  out["image"] = s.image;
  put_text(out, "imagePullPolicy", s.image_pull_policy);
  if (s.resources) {
    json resources = json::object();
    if (!s.resources->requests.empty()) resources["requests"] = s.resources->requests;
    if (!s.resources->limits.empty()) resources["limits"] = s.resources->limits;
    out["resources"] = resources;
  }
  json pool = json::object();
  for (const PoolEntry& p : s.pool.training) pool["training"].push_back(pool_entry_json(p, false));
  for (const PoolEntry& p : s.pool.inference) pool["inference"].push_back(pool_entry_json(p, true));
  for (const LocalWorker& w : s.pool.local) {
    json worker = {{"deviceClass", w.device_class}, {"threads", w.threads}, {"localBatch", w.local_batch}};
    put_text(worker, "name", w.name);
    put_text(worker, "memoryBudget", w.memory_budget);
    put_text(worker, "precision", w.precision);
    pool["local"].push_back(worker);
  }
  out["pool"] = pool;
  json planning = {{"allocator", s.planning.allocator},         {"precision", s.planning.precision},
                   {"lowPrecision", s.planning.low_precision}, {"indicator", s.planning.indicator},
                   {"batchMoves", s.planning.batch_moves}};
  put_text(planning, "stepTimeTarget", s.planning.step_time_target);
  put_text(planning, "profiles", s.planning.profiles);
  put_text(planning, "calibration", s.planning.calibration);
  out["planning"] = planning;
  json run_policy = {{"backoffLimit", s.run_policy.backoff_limit},
                     {"cleanPodPolicy", s.run_policy.clean_pod_policy},
                     {"suspend", s.run_policy.suspend},
                     {"managedBy", s.run_policy.managed_by}};
  if (s.run_policy.active_deadline_seconds) run_policy["activeDeadlineSeconds"] = *s.run_policy.active_deadline_seconds;
  if (s.run_policy.ttl_seconds_after_finished) run_policy["ttlSecondsAfterFinished"] = *s.run_policy.ttl_seconds_after_finished;
  out["runPolicy"] = run_policy;
  return out;
}

json to_json(const HybridTrainingJob& job) {
  json out = {{"apiVersion", API_VERSION}, {"kind", KIND}, {"metadata", job.metadata}, {"spec", to_json(job.spec)}};
  if (job.status) out["status"] = to_json(*job.status);
  return out;
}

}  // namespace qsync::api
