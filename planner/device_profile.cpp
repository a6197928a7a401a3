// File: planner/device_profile.cpp
// Device and communication profiles: JSON reading and writing (atomic), the checks that refuse
// a profile of another model or batch, the least-squares cast fit, batch scaling, and the
// profile store (measured files first, then GPU estimates). Estimates: estimated_profiles.cpp.
#include "planner/device_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "planner/atomic_file.h"

namespace qsync {
namespace {

using nlohmann::json;

const char* const PROFILE_KIND = "qsync-device-profile";
const char* const COMM_KIND = "qsync-comm-profile";

json cost_to_json(const LayerCost& c) {
  return {{"forward_seconds", c.forward_seconds}, {"backward_seconds", c.backward_seconds},
          {"saved_bytes", c.saved_bytes}, {"weight_bytes", c.weight_bytes}};
}

// An integer field as T: a JSON integer within T's range. A float is refused, whole or not (sizes
// and counts are integers, and converting a float beyond T's range is undefined).
template <class T>
T integer_of(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw std::invalid_argument(std::string("field '") + key + "' must be an integer");
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                            : v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                  v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max());
  if (!in_range) throw std::invalid_argument(std::string("field '") + key + "' is out of range");
  return T(v.get<int64_t>());
}

template <class T>
T optional_integer_of(const json& j, const char* key, T absent) {
  return j.contains(key) ? integer_of<T>(j, key) : absent;
}

LayerCost cost_from_json(const json& j) {
  LayerCost c;
  c.forward_seconds = j.at("forward_seconds").get<double>();
  c.backward_seconds = j.at("backward_seconds").get<double>();
  c.saved_bytes = integer_of<int64_t>(j, "saved_bytes");
  c.weight_bytes = optional_integer_of<int64_t>(j, "weight_bytes", 0);
  return c;
}

json casts_to_json(const std::map<std::pair<Precision, Precision>, LinearCost>& casts) {
  json out = json::array();
  for (const auto& [key, c] : casts)
    out.push_back({{"from", precision_name(key.first)}, {"to", precision_name(key.second)}, {"a", c.a}, {"b", c.b}});
  return out;
}

std::map<std::pair<Precision, Precision>, LinearCost> casts_from_json(const json& j) {
  std::map<std::pair<Precision, Precision>, LinearCost> out;
  for (const json& e : j) {
    const auto key = std::make_pair(precision_from_name(e.at("from").get<std::string>()),
                                    precision_from_name(e.at("to").get<std::string>()));
    out[key] = LinearCost{e.at("a").get<double>(), e.at("b").get<double>()};
  }
  return out;
}

uint64_t hash_from_string(const std::string& s) {
  size_t used = 0;
  uint64_t h = 0;
  try {
    h = std::stoull(s, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size())
    throw std::invalid_argument("model_hash '" + s + "' is not a hexadecimal model hash");
  return h;
}

json parse_json(const std::string& text, const std::string& source_name) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double
    throw std::invalid_argument(source_name + " is not valid JSON (" + e.what() +
                                "): re-create it with `qsync-worker profile` (or restore the file)");
  }
}

void check_version(const json& j, const char* kind, const std::string& source_name) {
  // Read without get<>: a kind or version of another JSON type is a wrong file, not a type_error.
  const json absent;
  const json& kind_value = j.is_object() && j.contains("kind") ? j["kind"] : absent;
  const std::string k = kind_value.is_string() ? kind_value.get<std::string>() : kind_value.dump();
  if (k != kind)
    throw std::invalid_argument(source_name + " is not a " + kind + " file (kind '" + k + "'): pass a file written by " +
                                (std::string(kind) == PROFILE_KIND ? "`qsync-worker profile`" : "`qsync-bench-allreduce --comm-profile`"));
  const int v = j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int>() : -1;
  if (v != DEVICE_PROFILE_VERSION)
    throw std::invalid_argument(source_name + " has format version " + std::to_string(v) + ", this build reads version " +
                                std::to_string(DEVICE_PROFILE_VERSION) + ": re-measure it with this build");
}

json comm_to_json(const CommProfile& p) {
  return {{"kind", COMM_KIND}, {"version", p.version}, {"world_size", p.world_size}, {"alpha", p.alpha},
          {"beta", p.beta}, {"late_sync_seconds", p.late_sync_seconds}, {"late_alpha", p.late_alpha},
          {"late_beta", p.late_beta}, {"estimated", p.estimated}, {"source", p.source}};
}

double log_batch_distance(int64_t a, int64_t b) { return std::fabs(std::log(double(a) / double(b))); }

}  // namespace

std::vector<LayerPrecision> DeviceProfile::precisions() const {
  std::vector<LayerPrecision> out;
  if (gemm_layers.empty()) return out;
  for (const LayerPrecisionTraits& t : layer_precision_table()) {
    bool everywhere = true;
    for (const auto& [name, costs] : gemm_layers) everywhere = everywhere && costs.count(t.mode) > 0;
    if (everywhere) out.push_back(t.mode);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// JSON

std::string device_profile_to_json(const DeviceProfile& p) {
  json gemm = json::object();
  for (const auto& [layer, costs] : p.gemm_layers) {
    json per = json::object();
    for (const auto& [prec, c] : costs) per[layer_precision_name(prec)] = cost_to_json(c);
    gemm[layer] = per;
  }
  json other = json::object();
  for (const auto& [layer, c] : p.other_layers) other[layer] = cost_to_json(c);
  const json j = {{"kind", PROFILE_KIND}, {"version", p.version}, {"model", p.model},
                  {"model_hash", model_hash_string(p.model_hash)}, {"device_class", p.device_class},
                  {"batch", p.batch}, {"estimated", p.estimated}, {"source", p.source},
                  {"gemm_layers", gemm}, {"other_layers", other}, {"casts", casts_to_json(p.casts)},
                  {"channel_casts", casts_to_json(p.channel_casts)}, {"optimizer_seconds", p.optimizer_seconds},
                  {"static_bytes", p.static_bytes}, {"memory_bytes", p.memory_bytes},
                  {"step_overhead_seconds", p.step_overhead_seconds}, {"step_overhead_bytes", p.step_overhead_bytes},
                  {"step_jitter", p.step_jitter}, {"world_size", p.world_size},
                  {"world_step_seconds", p.world_step_seconds}, {"world_signature", p.world_signature}};
  return j.dump(1) + "\n";
}

DeviceProfile device_profile_from_json(const std::string& text, const std::string& source_name) {
  const json j = parse_json(text, source_name);
  check_version(j, PROFILE_KIND, source_name);
  DeviceProfile p;
  try {
    p.version = integer_of<int>(j, "version");
    p.model = j.at("model").get<std::string>();
    p.model_hash = hash_from_string(j.at("model_hash").get<std::string>());
    p.device_class = j.at("device_class").get<std::string>();
    p.batch = integer_of<int64_t>(j, "batch");
    p.estimated = j.value("estimated", false);
    p.source = j.value("source", std::string());
    for (const auto& [layer, per] : j.at("gemm_layers").items())
      for (const auto& [prec, c] : per.items()) p.gemm_layers[layer][layer_precision_from_name(prec)] = cost_from_json(c);
    for (const auto& [layer, c] : j.at("other_layers").items()) p.other_layers[layer] = cost_from_json(c);
    p.casts = casts_from_json(j.value("casts", json::array()));
    p.channel_casts = casts_from_json(j.value("channel_casts", json::array()));
    p.optimizer_seconds = j.at("optimizer_seconds").get<double>();
    p.static_bytes = integer_of<int64_t>(j, "static_bytes");
    p.memory_bytes = optional_integer_of<int64_t>(j, "memory_bytes", 0);
    p.step_overhead_seconds = j.value("step_overhead_seconds", 0.0);
    p.step_overhead_bytes = optional_integer_of<int64_t>(j, "step_overhead_bytes", 0);
    p.step_jitter = j.value("step_jitter", 0.0);
    p.world_size = optional_integer_of<int>(j, "world_size", 0);
    p.world_step_seconds = j.value("world_step_seconds", 0.0);
    p.world_signature = j.value("world_signature", std::string());
  } catch (const json::exception& e) {
    throw std::invalid_argument(source_name + ": malformed device profile (" + e.what() +
                                "): re-measure it with `qsync-worker profile`");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source_name + ": " + e.what());
  }
  if (p.batch <= 0)
    throw std::invalid_argument(source_name + ": batch must be positive, got " + std::to_string(p.batch));
  return p;
}

DeviceProfile device_profile_load(const std::string& path) { return device_profile_from_json(file_read_all(path), path); }

void device_profile_write(const std::string& path, const DeviceProfile& p) {
  atomic_file_write(path, device_profile_to_json(p));
}

void device_profile_check(const DeviceProfile& p, const ModelDesc& model, int64_t batch, const std::string& where) {
  if (p.model != model.name || p.model_hash != model.hash)
    throw std::invalid_argument(where + ": the profile is of model '" + p.model + "' (hash " +
                                model_hash_string(p.model_hash) + ") but the job's model is '" + model.name + "' (hash " +
                                model_hash_string(model.hash) + "): measure this model with " +
                                device_profile_command(model, p.device_class, p.batch,
                                                       device_profile_file_name(model.name, p.device_class, p.batch)));
  if (batch > 0 && p.batch != batch)
    throw std::invalid_argument(where + ": the profile was measured at batch " + std::to_string(p.batch) +
                                " but batch " + std::to_string(batch) + " is needed: measure it with " +
                                device_profile_command(model, p.device_class, batch,
                                                       device_profile_file_name(model.name, p.device_class, batch)) +
                                " (or let the planner scale the profile)");
}


CommProfile comm_profile_load(const std::string& path) { return comm_profile_from_json(file_read_all(path), path); }

CommProfile comm_profile_from_json(const std::string& text, const std::string& path) {
  const json j = parse_json(text, path);
  check_version(j, COMM_KIND, path);
  CommProfile p;
  try {
    p.version = integer_of<int>(j, "version");
    p.world_size = integer_of<int>(j, "world_size");
    p.alpha = j.at("alpha").get<double>();
    p.beta = j.at("beta").get<double>();
    p.late_sync_seconds = j.value("late_sync_seconds", 0.0);
    p.late_alpha = j.value("late_alpha", 0.0);
    p.late_beta = j.value("late_beta", 0.0);
    p.estimated = j.value("estimated", false);
    p.source = j.value("source", std::string());
  } catch (const json::exception& e) {
    throw std::invalid_argument(path + ": malformed communication profile (" + e.what() +
                                "): re-measure it with `qsync-bench-allreduce --comm-profile FILE`");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": malformed communication profile (" + e.what() +
                                "): re-measure it with `qsync-bench-allreduce --comm-profile FILE`");
  }
  if (p.world_size < 1)
    throw std::invalid_argument(path + ": world_size must be at least 1, got " + std::to_string(p.world_size));
  return p;
}

void comm_profile_write(const std::string& path, const CommProfile& p) {
  atomic_file_write(path, comm_to_json(p).dump(1) + "\n");
}

std::string device_profile_file_name(const std::string& model, const std::string& device_class, int64_t batch) {
  return model + "." + device_class + ".b" + std::to_string(batch) + ".profile.json";
}

std::string device_profile_command(const ModelDesc& model, const std::string& device_class, int64_t batch,
                                   const std::string& out) {
  const std::string m = model.source.empty() ? model.name : model.source;
  return "`qsync-worker profile --model " + m + " --device-class " + device_class + " --batch " +
         std::to_string(batch) + " --out " + out + "`";
}

// ---------------------------------------------------------------------------------------------
// Fitting and scaling

LinearCost fit_linear_cost_relative(const std::vector<int64_t>& numel, const std::vector<double>& seconds) {
  if (numel.size() != seconds.size() || numel.empty())
    throw std::invalid_argument("fit_linear_cost_relative: needs as many sizes as times and at least one point, got " +
                                std::to_string(numel.size()) + " sizes and " + std::to_string(seconds.size()) + " times");
  double w = 0, wx = 0, wy = 0, wxx = 0, wxy = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    if (!(seconds[i] > 0)) continue;  // a zero time carries no relative error
    const double x = double(numel[i]), y = seconds[i], k = 1.0 / (y * y);
    w += k, wx += k * x, wy += k * y, wxx += k * x * x, wxy += k * x * y;
  }
  if (w == 0) return LinearCost{0, 0};
  const double det = w * wxx - wx * wx;
  if (!(det > 0)) return LinearCost{0, wy / w};  // one size: a constant
  const double a = (w * wxy - wx * wy) / det, b = (wy - a * wx) / w;
  if (a >= 0 && b >= 0) return LinearCost{a, b};
  if (a < 0) return LinearCost{0, wy / w};
  return LinearCost{wxx > 0 ? wxy / wxx : 0, 0};
}

LinearCost fit_linear_cost(const std::vector<int64_t>& numel, const std::vector<double>& seconds) {
  if (numel.size() != seconds.size() || numel.empty())
    throw std::invalid_argument("fit_linear_cost: needs as many sizes as times and at least one point, got " +
                                std::to_string(numel.size()) + " sizes and " + std::to_string(seconds.size()) + " times");
  const double n = double(numel.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    mx += double(numel[i]) / n;
    my += seconds[i] / n;
  }
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    sxx += (double(numel[i]) - mx) * (double(numel[i]) - mx);
    sxy += (double(numel[i]) - mx) * (seconds[i] - my);
  }
  if (sxx == 0) return LinearCost{0, std::max(0.0, my)};  // one point (or one size): a constant
  const double a = sxy / sxx, b = my - a * mx;
  if (a >= 0 && b >= 0) return LinearCost{a, b};
  // A negative coefficient is noise (a cost never shrinks with size nor starts below zero): the
  // best fit with it at zero.
  if (a < 0) return LinearCost{0, std::max(0.0, my)};
  double sxx0 = 0, sxy0 = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    sxx0 += double(numel[i]) * double(numel[i]);
    sxy0 += double(numel[i]) * seconds[i];
  }
  return LinearCost{std::max(0.0, sxy0 / sxx0), 0};
}

DeviceProfile device_profile_scaled(const DeviceProfile& p, int64_t batch) {
  if (batch <= 0 || p.batch <= 0)
    throw std::invalid_argument("device_profile_scaled: batches must be positive (profile " + std::to_string(p.batch) +
                                ", wanted " + std::to_string(batch) + ")");
  if (batch == p.batch) return p;
  const double f = double(batch) / double(p.batch);
  auto scale = [f](LayerCost c) {
    c.forward_seconds *= f;
    c.backward_seconds *= f;
    c.saved_bytes = int64_t(std::llround(double(c.saved_bytes) * f));
    return c;  // weight copies do not depend on the batch
  };
  DeviceProfile s = p;
  s.batch = batch;
  for (auto& [layer, costs] : s.gemm_layers)
    for (auto& [prec, c] : costs) c = scale(c);
  for (auto& [layer, c] : s.other_layers) c = scale(c);
  s.step_overhead_seconds *= f;
  s.world_size = 0;  // the world's step was measured at the profile's batch only
  s.world_step_seconds = 0;
  s.world_signature.clear();
  s.step_overhead_bytes = int64_t(std::llround(double(s.step_overhead_bytes) * f));
  s.source = p.source + " (scaled linearly from batch " + std::to_string(p.batch) + ")";
  return s;
}

// ---------------------------------------------------------------------------------------------
// The store

ProfileStore::ProfileStore(const std::string& dir) : dir_(dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw std::invalid_argument("profile directory '" + dir + "' does not exist: create it and measure profiles into it "
                                "with `qsync-worker profile ... --out " + dir + "/<file>.profile.json`");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // deterministic choice among equals
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    const auto ends_with = [&name](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with(".profile.json")) measured_.push_back(device_profile_load(f.string()));
    else if (name.rfind("comm", 0) == 0 && ends_with(".json")) comms_.push_back(comm_profile_load(f.string()));
  }
}

DeviceProfile ProfileStore::find(const ModelDesc& model, const std::string& device_class, int64_t batch) const {
  if (batch <= 0) throw std::invalid_argument("ProfileStore::find: batch must be positive, got " + std::to_string(batch));
  const DeviceProfile* best = nullptr;
  std::set<std::string> stale;  // the same model name and class with another hash
  for (const DeviceProfile& p : measured_) {
    if (p.device_class != device_class || p.model != model.name) continue;
    if (p.model_hash != model.hash) {
      stale.insert(model_hash_string(p.model_hash) + " at batch " + std::to_string(p.batch));
      continue;
    }
    if (p.batch == batch) return p;
    if (best == nullptr || log_batch_distance(p.batch, batch) < log_batch_distance(best->batch, batch) ||
        (log_batch_distance(p.batch, batch) == log_batch_distance(best->batch, batch) && p.batch > best->batch))
      best = &p;
  }
  if (best != nullptr) return device_profile_scaled(*best, batch);
  if (is_estimated_gpu_class(device_class)) return device_profile_estimate(model, device_class, batch);
  const std::string dir = dir_.empty() ? "." : dir_;
  std::string msg = "no device profile of model '" + model.name + "' (hash " + model_hash_string(model.hash) +
                    ") for device class " + device_class + " at batch " + std::to_string(batch) + " in " +
                    (dir_.empty() ? std::string("the store (no profile directory given)") : "'" + dir_ + "'");
  if (!stale.empty()) {
    msg += "; profiles of this model name with another hash (the model file changed since) exist:";
    for (const std::string& s : stale) msg += " " + s;
  }
  msg += ". Measure it with " +
         device_profile_command(model, device_class, batch,
                                dir + "/" + device_profile_file_name(model.name, device_class, batch));
  msg += " (estimated GPU classes need no profile:";
  for (const std::string& g : estimated_gpu_classes()) msg += " " + g;
  msg += ")";
  throw std::invalid_argument(msg);
}

CommProfile ProfileStore::comm(int world_size) const { return comm_profile_for_world(comms_, world_size); }

CommProfile comm_profile_for_world(const std::vector<CommProfile>& measured, int world_size) {
  if (world_size < 1) throw std::invalid_argument("comm_profile_for_world: world size must be at least 1, got " + std::to_string(world_size));
  const CommProfile* nearest = nullptr;
  for (const CommProfile& c : measured) {
    if (c.world_size == world_size) return c;
    if (c.world_size > 1 && (nearest == nullptr || std::abs(c.world_size - world_size) < std::abs(nearest->world_size - world_size)))
      nearest = &c;
  }
  if (nearest != nullptr && world_size > 1) return comm_profile_rescaled(*nearest, world_size);
  return comm_profile_estimate(world_size);
}

}  // namespace qsync
