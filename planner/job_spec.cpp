// File: planner/job_spec.cpp
// The job parser: JSON (the API server's objects, or a job file's YAML read as JSON) -> defaults
// and field checks from the table (job_field_validation.h) -> the cross-field rules -> plain reads
// of the validated object; and back to JSON.
#include "planner/job_spec.h"

#include <filesystem>
#include <set>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "planner/job_field_validation.h"
#include "planner/job_fields.h"
#include "planner/json_access.h"
#include "planner/model_onnx.h"

namespace qsync {
namespace {

using json = nlohmann::json;

// The rules the field table cannot state (the CRD states some as CEL, which only real API
// servers evaluate). `spec` has its defaults and passed the field checks.
void check_cross_field_rules(const json& spec, std::vector<std::string>& problems) {
  const json& model = spec["model"];
  const int sources = int(model.contains("zoo")) + int(model.contains("file")) + int(model.contains("onnx")) +
                      int(model.contains("configMap"));
  if (sources != 1)
    problems.push_back("spec.model: set exactly one of zoo (a zoo model name), file (a model file), onnx (an .onnx "
                       "file) or configMap, got " + std::to_string(sources));
  if (model.contains("onnx") && model["onnx"].is_string() && !is_onnx_path(model["onnx"].get<std::string>()))
    problems.push_back("spec.model.onnx: '" + model["onnx"].get<std::string>() +
                       "' is not an .onnx file; export one with tools/export_onnx.py, or use file for a YAML model");
  if (spec.contains("data") && spec["data"].contains("path") && spec["data"].contains("volume"))
    problems.push_back("spec.data: set path or volume, not both");
  if (spec.contains("steps") && spec.contains("epochs"))
    problems.push_back("spec.steps and spec.epochs are both set: keep one (steps: 300, or epochs: 1.5)");
  if (!spec.contains("steps") && !spec.contains("epochs"))
    problems.push_back("set spec.steps or spec.epochs (how long to train, e.g. steps: 300)");
  const json pool = spec.value("pool", json::object());
  std::set<std::string> names;
  for (const char* group : {"training", "inference"})
    for (const json& entry : pool.value(group, json::array()))
      if (entry.contains("name") && !names.insert(entry["name"].get<std::string>()).second)
        problems.push_back("spec.pool: the entry name \"" + entry["name"].get<std::string>() +
                           "\" is used twice; names must be unique over training and inference (they name the pods)");
  check_borrow_rules(spec, problems);  // job_borrow_spec.h
  check_pod_template_rules(spec, problems);  // job_pod_template.h
  check_scheduling_policy_rules(spec, problems);  // job_scheduling_policy.h
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
  if (e.contains("borrow")) p.borrow = borrow_spec_from(e["borrow"], where + ".borrow", problems);
  if (e.contains("podTemplate")) p.pod_template = pod_template_from(e["podTemplate"]);
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
  if (p.borrow) out["borrow"] = to_json(*p.borrow);
  if (!p.pod_template.empty()) out["podTemplate"] = to_json(p.pod_template);
  return out;
}

}  // namespace

std::vector<std::string> job_file_local_problems(const JobFile& file) {
  const JobSpec& s = file.spec;
  std::vector<std::string> problems;
  if (s.model.config_map)
    problems.push_back("spec.model.configMap names a Kubernetes ConfigMap, which only the operator reads; locally use "
                       "zoo (a zoo model name), file (a model file) or onnx (an .onnx file)");
  if (s.pool.local.empty())
    problems.push_back("spec.pool.local lists no workers; `qsync run` needs local workers, e.g. local: [{deviceClass: "
                       "cpu-avx2}, {deviceClass: cpu-sse41}]");
  if (!s.pool.local.empty() && s.global_batch < int64_t(s.pool.local.size()))
    problems.push_back("spec.globalBatch " + std::to_string(s.global_batch) + " is smaller than the " +
                       std::to_string(s.pool.local.size()) + " ranks of spec.pool.local: every rank needs a sample; "
                       "raise globalBatch to at least " + std::to_string(s.pool.local.size()));
  int64_t explicit_sum = 0, explicit_count = 0;
  bool beyond_int64 = false;  // localBatch values near 2^63 must not overflow the sum
  for (const LocalWorker& w : s.pool.local)
    if (w.local_batch > 0) {
      beyond_int64 = __builtin_add_overflow(explicit_sum, w.local_batch, &explicit_sum) || beyond_int64;
      ++explicit_count;
    }
  if (explicit_count == int64_t(s.pool.local.size()) && explicit_count > 0 &&
      (beyond_int64 || explicit_sum != s.global_batch))
    problems.push_back("the localBatch values of spec.pool.local add up to " +
                       (beyond_int64 ? std::string("more than 2^63") : std::to_string(explicit_sum)) +
                       ", not spec.globalBatch " + std::to_string(s.global_batch) + ": make them add up, or leave "
                       "localBatch out to split the global batch evenly");
  return problems;
}


JobSpec job_spec_from_json(const json& input) {
  json spec = input;
  apply_field_defaults(job_spec_fields(), "spec", spec);
  std::vector<std::string> problems = field_problems(job_spec_fields(), "spec", spec);
  if (!problems.empty() || !spec.is_object()) {  // reads below assume the fields' types
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
    throw std::invalid_argument("invalid spec: " + all);
  }
  check_cross_field_rules(spec, problems);

  JobSpec s;
  const json& model = spec["model"];
  s.model.zoo = json_text(model, "zoo");
  s.model.file = json_text(model, "file");
  s.model.onnx = json_text(model, "onnx");
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
  s.checkpoint = {json_text(c, "dir"), volume_from(c), json_integer(c, "intervalSteps"), json_integer(c, "keep")};
  s.image = json_text(spec, "image");
  s.image_pull_policy = json_text(spec, "imagePullPolicy");
  if (spec.contains("resources"))
    s.resources = ResourceRequirements{string_map(spec["resources"].value("requests", json::object())),
                                       string_map(spec["resources"].value("limits", json::object()))};
  if (spec.contains("podTemplate")) s.pod_template = pod_template_from(spec["podTemplate"]);
  const json pool = spec.value("pool", json::object());
  for (const char* group : {"training", "inference"}) {
    const json entries = pool.value(group, json::array());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string where = std::string("spec.pool.") + group + "[" + std::to_string(i) + "]";
      (group == std::string("training") ? s.pool.training : s.pool.inference).push_back(pool_entry_from(entries[i], where, problems));
    }
  }
  if (spec.contains("elasticPolicy")) s.elastic_policy = elastic_policy_from(spec["elasticPolicy"]);
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
  if (r.contains("schedulingPolicy")) s.run_policy.scheduling_policy = scheduling_policy_from(r["schedulingPolicy"]);

  if (!problems.empty()) {
    std::string all;
    for (const std::string& problem : problems) all += (all.empty() ? "" : "; ") + problem;
    throw std::invalid_argument("invalid spec: " + all);
  }
  return s;
}

json to_json(const JobSpec& s) {
  json model = json::object();
  put_text(model, "zoo", s.model.zoo);
  put_text(model, "file", s.model.file);
  put_text(model, "onnx", s.model.onnx);
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
  json checkpoint = {{"intervalSteps", s.checkpoint.interval_steps}, {"keep", s.checkpoint.keep}};
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
  if (!s.pod_template.empty()) out["podTemplate"] = to_json(s.pod_template);
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
  if (s.elastic_policy) out["elasticPolicy"] = to_json(*s.elastic_policy);
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
  if (s.run_policy.scheduling_policy) run_policy["schedulingPolicy"] = to_json(*s.run_policy.scheduling_policy);
  out["runPolicy"] = run_policy;
  return out;
}

std::string JobFile::resolve(const std::string& path) const {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(source).parent_path() / path).string();
}

std::string JobFile::model_reference() const {
  return spec.model.zoo.empty() ? resolve(spec.model.name_or_file()) : spec.model.zoo;
}

JobFile job_file_parse(const std::string& text, const std::string& source) {
  json root;
  try {
    root = job_yaml_to_json(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  if (!root.is_object())
    throw std::invalid_argument(source + ": a job file is a HybridTrainingJob mapping (apiVersion, kind, metadata, spec)");
  for (const auto& [key, value] : root.items())
    if (key != "apiVersion" && key != "kind" && key != "metadata" && key != "spec")
      throw std::invalid_argument(source + ": unknown field \"" + key + "\" in the job (known: apiVersion, kind, metadata, spec)");
  if (root.contains("kind") && root["kind"] != JOB_KIND)
    throw std::invalid_argument(source + ": kind is " + root["kind"].dump() + ", expected " + JOB_KIND);
  if (root.contains("apiVersion") && root["apiVersion"] != JOB_API_VERSION)
    throw std::invalid_argument(source + ": apiVersion is " + root["apiVersion"].dump() + ", expected " + JOB_API_VERSION);
  JobFile f;
  f.source = source;
  const json meta = root.value("metadata", json::object());
  if (meta.is_object() && meta.contains("name") && meta["name"].is_string()) f.name = meta["name"].get<std::string>();
  if (f.name.empty()) throw std::invalid_argument(source + ": metadata.name is missing (the job's name)");
  if (!root.contains("spec") || !root["spec"].is_object())
    throw std::invalid_argument(source + ": spec is missing (what to train and on which pool)");
  try {
    f.spec = job_spec_from_json(root["spec"]);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return f;
}

JobFile job_file_load(const std::string& path) {
  std::string text;
  try {
    text = file_read_all(path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("cannot read job file: ") + e.what());
  }
  return job_file_parse(text, path);
}

}  // namespace qsync
