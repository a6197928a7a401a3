// File: operator/reconciler/job_planning.cpp
// Pool, profiles, calibration and the allocator for a HybridTrainingJob (see job_planning.h).
#include "operator/reconciler/job_planning.h"

#include "operator/reconciler/comm_profiles.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>
#include <map>
#include <set>

#include "planner/allocator.h"
#include "planner/indicator.h"
#include "planner/model_desc.h"
#include "planner/model_onnx.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

std::string cm_name(const json& cm) { return cm["metadata"].value("name", ""); }

bool has_label(const json& cm, const std::string& key) {
  const json& labels = cm["metadata"].value("labels", json::object());
  return labels.contains(key) && labels[key].is_string() && labels[key].get<std::string>() == "true";
}

std::string cm_data(const json& cm, const std::string& key) {
  if (!cm.contains("data") || !cm["data"].contains(key) || !cm["data"][key].is_string()) return "";
  return cm["data"][key].get<std::string>();
}

// A ConfigMap's binaryData value (base64, as the API server returns it); "" when absent or invalid.
std::string cm_binary_data(const json& cm, const std::string& key) {
  if (!cm.contains("binaryData") || !cm["binaryData"].contains(key) || !cm["binaryData"][key].is_string()) return "";
  const std::string text = cm["binaryData"][key].get<std::string>();
  std::string out;
  uint32_t bits = 0;
  int n = 0;
  for (char c : text) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (c == '=' || c == '\n' || c == '\r') continue;
    if (v < 0) return "";
    bits = (bits << 6) | uint32_t(v);
    if ((n += 6) >= 8) {
      n -= 8;
      out.push_back(char((bits >> n) & 0xff));
    }
  }
  return out;
}

double log_batch_distance(int64_t a, int64_t b) { return std::abs(std::log(double(a) / double(b))); }

// The global batch split evenly over the ranks, as the worker does without a plan batch.
int64_t even_local_batch(int64_t global_batch, int64_t world, int64_t rank) {
  return std::max<int64_t>(1, global_batch / world + (rank < global_batch % world ? 1 : 0));
}

// Calibration statistics of this model, when a labelled ConfigMap holds them.
std::optional<CalibrationStats> calibration_for(const ModelDesc& model, const std::vector<json>& config_maps,
                                                std::vector<std::string>& notes) {
  for (const json& cm : config_maps) {
    if (!has_label(cm, CALIBRATION_LABEL)) continue;
    const std::string text = cm_data(cm, CALIBRATION_KEY);
    const std::string where = "ConfigMap " + cm_name(cm) + " key " + CALIBRATION_KEY;
    if (text.empty()) {
      notes.push_back(where + " is missing: calibration skipped");
      continue;
    }
    try {
      CalibrationStats stats = calibration_stats_parse(text, where);
      if (stats.model_hash != model.hash) continue;  // another model's statistics
      calibration_stats_check(stats, model);
      return stats;
    } catch (const std::exception& e) {
      notes.push_back(std::string("calibration skipped: ") + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

ModelDesc job_model(const api::HybridTrainingJob& job, const std::vector<json>& config_maps) {
  const api::ModelSource& m = job.spec.model;
  if (m.config_map) {
    for (const json& cm : config_maps) {
      if (cm_name(cm) != m.config_map->name) continue;
      const bool onnx = is_onnx_path(m.config_map->key);  // ONNX bytes: binaryData (kubectl --from-file does that)
      const std::string text = onnx ? cm_binary_data(cm, m.config_map->key) : cm_data(cm, m.config_map->key);
      const std::string where = "ConfigMap " + job.namespace_name() + "/" + m.config_map->name + " key " + m.config_map->key;
      if (text.empty())
        throw PlanningError("ModelMissing", where + (onnx ? " is missing from binaryData or empty: add the .onnx file "
                                                            "(kubectl create configmap NAME --from-file=model.onnx)"
                                                          : " is missing or empty: add the model description under that key"),
                            false);
      try {
        // named as the worker names the mounted file (/etc/qsync/model/<key>): the key's stem
        if (onnx) return model_desc_from_onnx(text, where, std::filesystem::path(m.config_map->key).stem().string());
        return model_desc_parse(text, where);
      } catch (const std::exception& e) {
        throw PlanningError("InvalidModel", std::string("spec.model.configMap: ") + e.what(), true);
      }
    }
    throw PlanningError("ModelMissing",
                        "spec.model.configMap names ConfigMap " + m.config_map->name + ", which does not exist in namespace " +
                            job.namespace_name() + ": create it (kubectl create configmap " + m.config_map->name +
                            " --from-file=" + m.config_map->key + "=MODEL.yaml)",
                        false);
  }
  const std::string& name = m.name_or_file();
  try {
    return model_desc_find(name);
  } catch (const std::exception& e) {
    const char* field = !m.zoo.empty() ? "spec.model.zoo: " : !m.onnx.empty() ? "spec.model.onnx: " : "spec.model.file: ";
    throw PlanningError("InvalidModel", field + std::string(e.what()), true);
  }
}

ConfigMapProfiles profiles_from_config_maps(const std::vector<json>& config_maps, const std::string& name_prefix) {
  ConfigMapProfiles out;
  for (const json& cm : config_maps) {
    if (!has_label(cm, PROFILE_LABEL) || cm_name(cm).rfind(name_prefix, 0) != 0) continue;
    const std::string where = "ConfigMap " + cm_name(cm) + " key " + PROFILE_KEY;
    const std::string text = cm_data(cm, PROFILE_KEY);
    if (text.empty()) {
      out.problems.push_back(where + " is missing: the profile ConfigMap needs --from-file=" + PROFILE_KEY + "=FILE");
      continue;
    }
    try {
      out.profiles.push_back(device_profile_from_json(text, where));
    } catch (const std::exception& e) {
      out.problems.push_back(std::string("skipped: ") + e.what());
    }
  }
  return out;
}

std::string profile_missing_message(const ModelDesc& model, const std::string& model_ref, const std::string& device_class,
                                    int64_t batch, const std::string& ns) {
  const std::string file = device_profile_file_name(model.name, device_class, batch);
  std::string cm = "qsync-profile-" + model.name + "-" + device_class + "-b" + std::to_string(batch);
  for (char& c : cm)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) c = '-';
  for (char& c : cm) c = char(std::tolower(static_cast<unsigned char>(c)));
  return "no device profile of model " + model.name + " (hash " + model_hash_string(model.hash) + ") for device class " +
         device_class + " at batch " + std::to_string(batch) + " in namespace " + ns +
         ". Measure it on a " + device_class + " machine and store it: " +
         "qsync-worker profile --model " + model_ref + " --device-class " + device_class + " --batch " +
         std::to_string(batch) + " --out " + file + " && kubectl create configmap -n " + ns + " " + cm +
         " --from-file=" + PROFILE_KEY + "=" + file + " && kubectl label configmap -n " + ns + " " + cm + " " +
         PROFILE_LABEL + "=true";
}

DeviceProfile select_profile(const std::vector<DeviceProfile>& measured, const ModelDesc& model, const std::string& model_ref,
                             const std::string& device_class, int64_t batch, const std::string& ns) {
  const DeviceProfile* best = nullptr;
  for (const DeviceProfile& p : measured) {
    if (p.device_class != device_class || p.model_hash != model.hash || p.batch <= 0) continue;
    if (p.batch == batch) return p;
    if (best == nullptr || log_batch_distance(p.batch, batch) < log_batch_distance(best->batch, batch) ||
        (log_batch_distance(p.batch, batch) == log_batch_distance(best->batch, batch) && p.batch > best->batch))
      best = &p;
  }
  if (best != nullptr) return device_profile_scaled(*best, batch);
  if (is_estimated_gpu_class(device_class)) return device_profile_estimate(model, device_class, batch);
  throw PlanningError("ProfileMissing", profile_missing_message(model, model_ref, device_class, batch, ns), false);
}

std::string precision_mix(const ModelDesc& model, const RankPlan& plan) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (const LayerDesc* l : model_gemm_layers(model)) {
    const std::string p = layer_precision_name(plan.precision_of(l->name));
    if (counts[p]++ == 0) order.push_back(p);
  }
  std::string s;
  for (const std::string& p : order) s += (s.empty() ? "" : " ") + p + ":" + std::to_string(counts[p]);
  return s;
}

JobPlan plan_job(const api::HybridTrainingJob& job, const PlanningInputs& inputs) {
  bool borrows = false;
  if (inputs.capacity != nullptr)
    for (const auto& [entry, ranks] : inputs.capacity->borrowed) borrows = borrows || !ranks.empty();
  if (!borrows) return plan_pool(job, inputs);
  try {
    return plan_pool(job, inputs);
  } catch (const PlanningError& e) {
    if (e.reason() != "InfeasiblePlan") throw;
    // The borrowed devices cannot hold their share (memory): plan without them, and say so.
    PoolCapacity without = *inputs.capacity;
    for (auto& [entry, ranks] : without.borrowed) ranks.clear();
    PlanningInputs fallback = inputs;
    fallback.capacity = &without;
    JobPlan plan = plan_pool(job, fallback);
    plan.notes.push_back(std::string("planned without the borrowed devices: with them the plan is infeasible (") + e.what() + ")");
    return plan;
  }
}

namespace {

// The pool's ranks as discovered on the cluster (training nodes and lent GPUs), with the notes of
// the discovery; PlanningError when there are none.
void discover_ranks(const api::HybridTrainingJob& job, const PlanningInputs& inputs, JobPlan& out) {
  try {
    DiscoveredPool pool = discover_pool(job.spec.pool, inputs.nodes, inputs.capacity, inputs.limits);
    out.ranks = std::move(pool.ranks);
    out.notes = std::move(pool.notes);
  } catch (const PoolDiscoveryError& e) {
    throw PlanningError(e.reason(), e.what(), e.reason() == "NoMatchingNodes");
  }
  if (out.ranks.empty())
    throw PlanningError("NoMatchingNodes",
                        inputs.capacity == nullptr ? "spec.pool has no ranks: give an entry a count"
                                                   : "the elastic pool offers no ranks now: waiting for nodes or lent GPUs",
                        inputs.capacity == nullptr);
}

// Each rank's device profile at its even share of the global batch (measured in the namespace's
// ConfigMaps, or estimated); PlanningError ProfileMissing naming every (class, batch) without one.
std::vector<PoolRank> pool_ranks_with_profiles(const api::HybridTrainingJob& job, const ModelDesc& model,
                                               const ConfigMapProfiles& measured, JobPlan& out) {
  // How the worker names the model: the zoo name, the file, or where the ConfigMap is mounted.
  const api::ModelSource& source = job.spec.model;
  const std::string model_ref = source.config_map ? "MODEL.yaml (ConfigMap " + source.config_map->name + ")"
                                                    : source.name_or_file();
  const int64_t world = int64_t(out.ranks.size());
  std::vector<PoolRank> pool;
  std::vector<std::string> missing;
  std::set<std::pair<std::string, int64_t>> missing_seen;
  for (const DiscoveredRank& r : out.ranks) {
    PoolRank p;
    p.device_class = r.device_class;
    p.node = r.node;
    p.memory_budget_bytes = r.memory_budget_bytes;
    const int64_t batch = even_local_batch(job.spec.global_batch, world, r.rank);
    try {
      p.profile = select_profile(measured.profiles, model, model_ref, r.device_class, batch, job.namespace_name());
    } catch (const PlanningError& e) {
      if (missing_seen.insert({r.device_class, batch}).second) missing.push_back(e.what());
      continue;
    }
    if (p.memory_budget_bytes == 0) p.memory_budget_bytes = p.profile.memory_bytes;
    pool.push_back(std::move(p));
  }
  if (!missing.empty()) {
    std::string message;
    for (const std::string& m : missing) message += (message.empty() ? "" : "; ") + m;
    throw PlanningError("ProfileMissing", message, false);
  }
  return pool;
}

// The allocation as the job's status and plan ConfigMap carry it: a summary per rank and the
// rank plan files.
void record_allocation(const api::HybridTrainingJob& job, const ModelDesc& model, const Allocation& a, JobPlan& out) {
  const int64_t world = int64_t(out.ranks.size());
  out.notes.insert(out.notes.end(), a.notes.begin(), a.notes.end());
  out.summary.strategy = job.spec.planning.allocator;
  out.summary.predicted_step_seconds = a.predicted.step_seconds;
  out.summary.step_time_target_seconds = a.step_time_target;
  out.summary.config_map = job.name() + "-plan";
  for (size_t r = 0; r < a.plans.size(); ++r) {
    RankPlan file = a.plans[r];
    file.model = model.name;
    file.model_hash = model.hash;
    file.rank = int(r);
    file.device_class = out.ranks[r].device_class;
    api::RankPlan summary;
    summary.rank = int64_t(r);
    summary.node = out.ranks[r].node;
    summary.device_class = out.ranks[r].device_class;
    summary.precision_mix = precision_mix(model, file);
    summary.local_batch = file.local_batch > 0 ? file.local_batch : even_local_batch(job.spec.global_batch, world, int64_t(r));
    summary.predicted_step_seconds = file.predicted_step_seconds > 0 ? file.predicted_step_seconds : a.predicted.step_seconds;
    if (r < a.predicted.ranks.size()) out.ranks[r].predicted_memory_bytes = a.predicted.ranks[r].peak_memory_bytes;
    out.summary.ranks.push_back(summary);
    out.rank_files.push_back(std::move(file));
  }
}

}  // namespace

JobPlan plan_pool(const api::HybridTrainingJob& job, const PlanningInputs& inputs) {
  JobPlan out;
  discover_ranks(job, inputs, out);
  const ModelDesc model = job_model(job, inputs.config_maps);
  const api::PlanningSpec& planning = job.spec.planning;
  const int64_t world = int64_t(out.ranks.size());
  if (job.spec.global_batch < world)
    throw PlanningError("InvalidPlanning",
                        "spec.globalBatch " + std::to_string(job.spec.global_batch) + " is smaller than the " +
                            std::to_string(world) + " ranks of the pool: raise globalBatch to at least " +
                            std::to_string(world),
                        true);

  AllocationRequest req;
  req.model = model;
  req.global_batch = job.spec.global_batch;
  req.step_time_target = planning.step_time_target_seconds;
  req.allow_batch_moves = planning.batch_moves;
  try {
    req.high = layer_precision_from_name(planning.precision);
    req.low = layer_precision_from_name(planning.low_precision);
  } catch (const std::exception& e) {
    throw PlanningError("InvalidPlanning", std::string("spec.planning: ") + e.what(), true);
  }
  const ConfigMapProfiles measured = profiles_from_config_maps(inputs.config_maps, planning.profiles);
  out.notes.insert(out.notes.end(), measured.problems.begin(), measured.problems.end());
  req.pool = pool_ranks_with_profiles(job, model, measured, out);
  // The measured all-reduce when the namespace holds one (comm_profiles.h), else the estimate.
  PlanningComm comm = planning_comm_profile(inputs.config_maps, planning.profiles, int(world));
  req.comm = comm.profile;
  out.notes.insert(out.notes.end(), comm.problems.begin(), comm.problems.end());
  out.notes.push_back(comm.note);
  std::optional<CalibrationStats> stats = calibration_for(model, inputs.config_maps, out.notes);
  req.indicator = stats ? indicator_table(*stats, planning.indicator == "weight-error" ? IndicatorKind::WEIGHT_ERROR
                                                                                      : IndicatorKind::BIDIRECTIONAL)
                        : indicator_fallback_table(model);

  Allocation a;
  try {
    a = allocate(req, planning.allocator);
  } catch (const InfeasiblePlan& e) {
    throw PlanningError("InfeasiblePlan", e.what(), true);
  } catch (const std::invalid_argument& e) {
    throw PlanningError("InvalidPlanning", std::string("spec.planning.allocator: ") + e.what(), true);
  }
  record_allocation(job, model, a, out);
  return out;
}

json job_plan_to_json(const JobPlan& plan) {
  api::HybridTrainingJobStatus status;
  status.plan = plan.summary;
  json out = to_json(status)["plan"];
  json placement = json::array();
  for (const DiscoveredRank& r : plan.ranks)
    placement.push_back({{"rank", r.rank},
                         {"node", r.node},
                         {"deviceClass", r.device_class},
                         {"poolKind", r.pool_kind},
                         {"entry", r.entry},
                         {"memoryBudgetBytes", r.memory_budget_bytes},
                         {"gpus", r.gpus},
                         {"predictedMemoryBytes", r.predicted_memory_bytes}});
  out["placement"] = placement;
  out["notes"] = plan.notes;
  return out;
}

JobPlan job_plan_from_json(const json& plan_json) {
  if (!plan_json.is_object() || !plan_json.contains("placement") || !plan_json["placement"].is_array())
    throw std::invalid_argument("plan.json: expected an object with a placement list (re-plan: delete the plan ConfigMap)");
  JobPlan out;
  try {
    json summary_only = plan_json;
    summary_only.erase("placement");
    summary_only.erase("notes");
    const api::HybridTrainingJobStatus status = api::hybrid_training_job_status_from_json({{"plan", summary_only}});
    if (status.plan) out.summary = *status.plan;
    for (const json& r : plan_json["placement"]) {
      DiscoveredRank d;
      d.rank = r.at("rank").get<int64_t>();
      d.node = r.at("node").get<std::string>();
      d.device_class = r.at("deviceClass").get<std::string>();
      d.pool_kind = r.at("poolKind").get<std::string>();
      d.entry = r.value("entry", "");
      d.memory_budget_bytes = r.value("memoryBudgetBytes", int64_t(0));
      d.gpus = r.value("gpus", int64_t(0));
      d.predicted_memory_bytes = r.value("predictedMemoryBytes", int64_t(0));
      out.ranks.push_back(std::move(d));
    }
    if (plan_json.contains("notes")) out.notes = plan_json["notes"].get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("plan.json: ") + e.what() + " (re-plan: delete the plan ConfigMap)");
  }
  return out;
}

}  // namespace qsync::reconciler
