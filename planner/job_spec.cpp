// File: planner/job_spec.cpp
// Job file parsing (yaml-cpp).
#include "planner/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "planner/layer_precision.h"

namespace qsync {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw std::invalid_argument(source + ": " + what);
}

void check_keys(const YAML::Node& m, const std::set<std::string>& allowed, const std::string& source,
                const std::string& where) {
  if (!m.IsMap()) fail(source, where + " must be a mapping");
  for (const auto& kv : m) {
    const std::string k = kv.first.as<std::string>();
    if (!allowed.count(k)) {
      std::string known;
      for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
      fail(source, "unknown field '" + k + "' in " + where + " (known: " + known + ")");
    }
  }
}

template <class T>
T get(const YAML::Node& m, const char* key, T fallback, const std::string& source, const std::string& where) {
  const YAML::Node v = m[key];
  if (!v) return fallback;
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    fail(source, where + "." + key + " has the wrong type ('" + YAML::Dump(v) + "')");
  }
}

void check_precision(const std::string& name, const std::string& source, const std::string& where) {
  try {
    (void)layer_precision_from_name(name);
  } catch (const std::invalid_argument& e) {
    fail(source, where + ": " + e.what());
  }
}

}  // namespace

int64_t parse_memory_quantity(const std::string& s, const std::string& what) {
  static const std::pair<const char*, int64_t> suffixes[] = {
      {"Ki", 1ll << 10}, {"Mi", 1ll << 20}, {"Gi", 1ll << 30}, {"Ti", 1ll << 40},
      {"k", 1000ll},     {"M", 1000000ll},  {"G", 1000000000ll}, {"T", 1000000000000ll}};
  for (const auto& [suffix, mult] : suffixes) {
    const std::string sf = suffix;
    if (s.size() > sf.size() && s.compare(s.size() - sf.size(), sf.size(), sf) == 0) {
      const std::string number = s.substr(0, s.size() - sf.size());
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(number, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != number.size() || v < 0) break;
      return int64_t(v * double(mult));
    }
  }
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || v < 0)
    throw std::invalid_argument(what + ": '" + s + "' is not a memory quantity (use e.g. 512Mi, 2Gi or bytes)");
  return v;
}

double parse_duration_seconds(const std::string& s, const std::string& what) {
  static const std::pair<const char*, double> units[] = {{"ms", 1e-3}, {"us", 1e-6}, {"s", 1.0}, {"m", 60.0}};
  std::string number = s;
  double unit = 1.0;
  for (const auto& [suffix, scale] : units) {
    const std::string sf = suffix;
    if (s.size() > sf.size() && s.compare(s.size() - sf.size(), sf.size(), sf) == 0) {
      number = s.substr(0, s.size() - sf.size());
      unit = scale;
      break;
    }
  }
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || !(v > 0))
    throw std::invalid_argument(what + ": '" + s + "' is not a positive duration (use e.g. 250ms, 1.5s or seconds)");
  return v * unit;
}

JobSpec job_spec_parse(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(source, "malformed YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                     std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) fail(source, "a job file is a HybridTrainingJob mapping (apiVersion, kind, metadata, spec)");
  check_keys(root, {"apiVersion", "kind", "metadata", "spec"}, source, "the job");
  if (root["kind"] && root["kind"].as<std::string>() != "HybridTrainingJob")
    fail(source, "kind is '" + root["kind"].as<std::string>() + "', expected HybridTrainingJob");
  JobSpec j;
  j.source = source;
  j.name = root["metadata"] && root["metadata"]["name"] ? root["metadata"]["name"].as<std::string>() : "";
  if (j.name.empty()) fail(source, "metadata.name is missing (the job's name)");
  const YAML::Node spec = root["spec"];
  if (!spec) fail(source, "spec is missing");
  check_keys(spec,
             {"model", "data", "optimizer", "steps", "epochs", "globalBatch", "seed", "evalLimit", "evalEvery", "checkpoint",
              "planning", "pool", "runPolicy", "image", "imagePullPolicy", "resources"},
             source, "spec");
  const YAML::Node model = spec["model"];
  if (!model) fail(source, "spec.model is missing: {zoo: cnn} or {file: model.yaml}");
  check_keys(model, {"zoo", "file", "configMap"}, source, "spec.model");
  if (model["zoo"]) {
    j.model = model["zoo"].as<std::string>();
  } else if (model["file"]) {
    const std::filesystem::path p = model["file"].as<std::string>();
    j.model = p.is_absolute() ? p.string() : (std::filesystem::path(source).parent_path() / p).string();
  } else {
    fail(source, model["configMap"] ? "spec.model.configMap names a Kubernetes ConfigMap, which only the operator reads; "
                                      "locally use zoo (a zoo model name) or file (a model file)"
                                    : "spec.model needs zoo (a zoo model name) or file (a model file)");
  }
  if (const YAML::Node d = spec["data"]) {
    check_keys(d, {"path", "volume"}, source, "spec.data");
    j.data = get<std::string>(d, "path", "", source, "spec.data");
  }
  if (const YAML::Node o = spec["optimizer"]) {
    check_keys(o, {"name", "lr", "weightDecay", "warmupSteps", "gradClip", "schedule"}, source, "spec.optimizer");
    j.optimizer = get<std::string>(o, "name", j.optimizer, source, "spec.optimizer");
    if (j.optimizer != "adamw" && j.optimizer != "sgd")
      fail(source, "spec.optimizer.name '" + j.optimizer + "' is not one of adamw, sgd");
    j.lr = get<double>(o, "lr", j.lr, source, "spec.optimizer");
    j.weight_decay = get<double>(o, "weightDecay", 0.0, source, "spec.optimizer");
    j.warmup_steps = get<int64_t>(o, "warmupSteps", 0, source, "spec.optimizer");
    j.grad_clip = get<double>(o, "gradClip", 0.0, source, "spec.optimizer");
    j.lr_schedule = get<std::string>(o, "schedule", j.lr_schedule, source, "spec.optimizer");
    if (j.lr_schedule != "constant" && j.lr_schedule != "cosine")
      fail(source, "spec.optimizer.schedule '" + j.lr_schedule + "' is not one of constant, cosine");
    if (j.lr <= 0) fail(source, "spec.optimizer.lr must be positive");
  }
  j.steps = get<int64_t>(spec, "steps", 0, source, "spec");
  j.epochs = get<double>(spec, "epochs", 0.0, source, "spec");
  if (j.steps < 0 || j.epochs < 0) fail(source, "spec.steps and spec.epochs must not be negative");
  if (j.steps == 0 && j.epochs == 0) fail(source, "set spec.steps or spec.epochs (how long to train)");
  if (j.steps > 0 && j.epochs > 0) fail(source, "set spec.steps or spec.epochs, not both");
  j.global_batch = get<int64_t>(spec, "globalBatch", j.global_batch, source, "spec");
  if (j.global_batch <= 0) fail(source, "spec.globalBatch must be positive, got " + std::to_string(j.global_batch));
  j.seed = get<uint64_t>(spec, "seed", 1, source, "spec");
  j.eval_limit = get<int64_t>(spec, "evalLimit", 0, source, "spec");
  j.eval_every = get<int64_t>(spec, "evalEvery", 0, source, "spec");
  if (j.eval_every < 0) fail(source, "spec.evalEvery must not be negative");
  if (const YAML::Node c = spec["checkpoint"]) {
    check_keys(c, {"dir", "intervalSteps", "volume"}, source, "spec.checkpoint");
    j.checkpoint_dir = get<std::string>(c, "dir", "", source, "spec.checkpoint");
    j.checkpoint_interval_steps = get<int64_t>(c, "intervalSteps", 0, source, "spec.checkpoint");
  }
  if (const YAML::Node p = spec["planning"]) {
    check_keys(p,
               {"allocator", "precision", "stepTimeTarget", "lowPrecision", "indicator", "profiles", "calibration",
                "batchMoves"},
               source, "spec.planning");
    j.allocator = get<std::string>(p, "allocator", j.allocator, source, "spec.planning");
    if (j.allocator != "uniform" && j.allocator != "exact" && j.allocator != "greedy" &&
        j.allocator != "dynamic-batching" && j.allocator != "uniform-low-weak")
      fail(source, "spec.planning.allocator '" + j.allocator +
                       "' is not one of exact, greedy, uniform, uniform-low-weak, dynamic-batching");
    j.precision = get<std::string>(p, "precision", j.precision, source, "spec.planning");
    check_precision(j.precision, source, "spec.planning.precision");
    j.low_precision = get<std::string>(p, "lowPrecision", j.low_precision, source, "spec.planning");
    check_precision(j.low_precision, source, "spec.planning.lowPrecision");
    const std::string target = get<std::string>(p, "stepTimeTarget", "", source, "spec.planning");
    if (!target.empty())
      j.step_time_target_seconds = parse_duration_seconds(target, source + ": spec.planning.stepTimeTarget");
    j.indicator = get<std::string>(p, "indicator", j.indicator, source, "spec.planning");
    if (j.indicator != "bidirectional" && j.indicator != "weight-error")
      fail(source, "spec.planning.indicator '" + j.indicator + "' is not one of bidirectional, weight-error");
    const auto relative_to_job = [&](const std::string& v) {
      const std::filesystem::path path = v;
      return v.empty() || path.is_absolute() ? v : (std::filesystem::path(source).parent_path() / path).string();
    };
    j.profiles_dir = relative_to_job(get<std::string>(p, "profiles", "", source, "spec.planning"));
    j.calibration = relative_to_job(get<std::string>(p, "calibration", "", source, "spec.planning"));
    j.batch_moves = get<bool>(p, "batchMoves", true, source, "spec.planning");
  }
  if (const YAML::Node pool = spec["pool"]) {
    check_keys(pool, {"local", "training", "inference"}, source, "spec.pool");
    if (const YAML::Node local = pool["local"]) {
      if (!local.IsSequence() || local.size() == 0) fail(source, "spec.pool.local must be a non-empty list of workers");
      for (size_t i = 0; i < local.size(); ++i) {
        const std::string where = "spec.pool.local[" + std::to_string(i) + "]";
        check_keys(local[i], {"deviceClass", "threads", "memoryBudget", "precision", "localBatch", "name"}, source, where);
        LocalWorkerSpec w;
        w.device_class = get<std::string>(local[i], "deviceClass", "", source, where);
        if (w.device_class.empty()) fail(source, where + ".deviceClass is missing (e.g. cpu-avx2)");
        w.threads = get<int>(local[i], "threads", 1, source, where);
        if (w.threads < 1) fail(source, where + ".threads must be at least 1");
        const std::string budget = get<std::string>(local[i], "memoryBudget", "", source, where);
        if (!budget.empty()) w.memory_budget_bytes = parse_memory_quantity(budget, source + ": " + where + ".memoryBudget");
        w.precision = get<std::string>(local[i], "precision", "", source, where);
        if (!w.precision.empty()) check_precision(w.precision, source, where + ".precision");
        w.local_batch = get<int64_t>(local[i], "localBatch", 0, source, where);
        if (w.local_batch < 0) fail(source, where + ".localBatch must not be negative");
        j.local_workers.push_back(w);
      }
    }
  }
  return j;
}

JobSpec job_spec_load(const std::string& path) {
  std::string text;
  try {
    text = file_read_all(path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("cannot read job file: ") + e.what());
  }
  return job_spec_parse(text, path);
}

}  // namespace qsync
