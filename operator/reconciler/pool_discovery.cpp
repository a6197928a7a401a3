// File: operator/reconciler/pool_discovery.cpp
// Ranks onto nodes and device classes for a HybridTrainingJob (see pool_discovery.h).
#include "operator/reconciler/pool_discovery.h"

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <map>
#include <set>

#include "kernels/device_class.h"
#include "operator/reconciler/node_placement.h"
#include "planner/device_profile.h"
#include "planner/job_spec.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

std::string label_of(const json& node, const std::string& key) {
  const json& labels = node["metadata"].value("labels", json::object());
  auto it = labels.find(key);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string node_name(const json& node) { return node["metadata"].value("name", ""); }

bool selector_matches(const std::map<std::string, std::string>& selector, const json& node) {
  const json& labels = node["metadata"].value("labels", json::object());
  for (const auto& [key, value] : selector) {
    auto it = labels.find(key);
    if (it == labels.end() || !it->is_string() || it->get<std::string>() != value) return false;
  }
  return true;
}

std::string selector_text(const std::map<std::string, std::string>& selector) {
  if (selector.empty()) return "{} (every node)";
  std::string s = "{";
  for (const auto& [key, value] : selector) s += (s.size() > 1 ? ", " : "") + key + ": " + value;
  return s + "}";
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The rank's class: the entry's, the node's class label, or its GPU product label.
std::string class_for(const api::PoolEntry& entry, const json& node, const std::string& entry_path) {
  if (!entry.device_class.empty()) {
    if (!is_known_device_class(entry.device_class))
      throw PoolDiscoveryError("UnknownDeviceClass", entry_path + ".deviceClass '" + entry.device_class +
                                                         "' is not a known device class; known: " +
                                                         joined(known_device_classes()));
    return entry.device_class;
  }
  const std::string labelled = label_of(node, DEVICE_CLASS_LABEL);
  if (!labelled.empty()) {
    if (!is_known_device_class(labelled))
      throw PoolDiscoveryError("UnknownDeviceClass", "node " + node_name(node) + " has label " + DEVICE_CLASS_LABEL + "=" +
                                                         labelled + ", which is not a known device class; known: " +
                                                         joined(known_device_classes()) + ". Relabel the node or set " +
                                                         entry_path + ".deviceClass");
    return labelled;
  }
  const std::string product = label_of(node, GPU_PRODUCT_LABEL);
  const std::string mapped = device_class_from_gpu_product(product);
  if (!mapped.empty()) return mapped;
  throw PoolDiscoveryError(
      "UnknownDeviceClass",
      "unknown device class on node " + node_name(node) + ": " +
          (product.empty() ? std::string("it has neither ") + DEVICE_CLASS_LABEL + " nor " + GPU_PRODUCT_LABEL + " labels"
                           : std::string(GPU_PRODUCT_LABEL) + "=" + product + " names no known GPU") +
          ". Label it (kubectl label node " + node_name(node) + " " + DEVICE_CLASS_LABEL + "=CLASS) or set " + entry_path +
          ".deviceClass; known classes: " + joined(known_device_classes()));
}

}  // namespace

std::string device_class_from_gpu_product(const std::string& product) {
  // The device-class table's own product matching (kernels/device_class.h): the worker checks
  // its GPU against the same names ("A10G" is an A10, "A100" is not).
  const DeviceClass* c = device_class_for_gpu_product(product);
  return c != nullptr ? c->name : "";
}

std::vector<std::string> known_device_classes() {
  std::vector<std::string> out = estimated_gpu_classes();
  for (const DeviceClass& c : device_classes())
    if (c.name.rfind("cpu-", 0) == 0) out.push_back(c.name);
  return out;
}

bool is_known_device_class(const std::string& device_class) {
  const std::vector<std::string> known = known_device_classes();
  return std::find(known.begin(), known.end(), device_class) != known.end();
}

bool is_gpu_device_class(const std::string& device_class) { return device_class.rfind("gpu-", 0) == 0; }

bool node_is_schedulable(const json& node) {
  if (node.contains("spec") && node["spec"].value("unschedulable", false)) return false;
  if (!node.contains("status") || !node["status"].contains("conditions")) return true;
  for (const json& c : node["status"]["conditions"])
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  return true;
}

namespace {

// A rank of `entry` on `node`.
DiscoveredRank make_rank(const api::PoolEntry& entry, const json& node, const std::string& path, const char* kind,
                         int64_t index) {
  DiscoveredRank r;
  r.rank = index;
  r.node = node_name(node);
  r.device_class = class_for(entry, node, path);
  r.pool_kind = kind;
  r.entry = entry.name;
  r.gpus = entry.gpus_per_rank.value_or(is_gpu_device_class(r.device_class) ? 1 : 0);
  r.memory_budget_bytes = entry.memory_budget_bytes;
  if (r.memory_budget_bytes == 0 && !is_gpu_device_class(r.device_class) && node.contains("status")) {
    const json& alloc = node["status"].value("allocatable", json::object());
    if (alloc.contains("memory") && alloc["memory"].is_string()) {
      try {
        r.memory_budget_bytes = parse_memory_quantity(alloc["memory"].get<std::string>(), "node " + r.node + " allocatable memory");
      } catch (const std::invalid_argument&) {
        r.memory_budget_bytes = 0;  // an odd quantity: plan without a memory limit
      }
    }
  }
  return r;
}

}  // namespace

DiscoveredPool discover_pool(const api::PoolSpec& pool, const std::vector<json>& nodes, const PoolCapacity* capacity,
                             const PlacementLimits* limits) {
  std::vector<const json*> sorted;
  for (const json& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(), [](const json* a, const json* b) { return node_name(*a) < node_name(*b); });
  std::map<std::string, int64_t> free = capacity != nullptr ? capacity->free_gpus
                                        : limits != nullptr  ? limits->free_gpus
                                                             : std::map<std::string, int64_t>{};
  std::map<std::string, double> free_cpus = limits != nullptr ? limits->free_cpus : std::map<std::string, double>{};

  DiscoveredPool out;
  std::set<std::string> used;  // nodes earlier entries placed ranks on
  auto place = [&](const std::vector<api::PoolEntry>& entries, const char* kind) {
    for (size_t e = 0; e < entries.size(); ++e) {
      const api::PoolEntry& entry = entries[e];
      const std::string path = std::string("spec.pool.") + kind + "[" + std::to_string(e) + "] (" + entry.name + ")";
      if (capacity != nullptr && capacity->borrowed.count(entry.name) != 0) {  // a borrowing entry
        int64_t placed = 0;
        for (const json* n : sorted) {
          auto it = capacity->borrowed.at(entry.name).find(node_name(*n));
          if (it == capacity->borrowed.at(entry.name).end() || !selector_matches(entry.node_selector, *n)) continue;
          for (int64_t i = 0; i < it->second && placed < entry.count; ++i, ++placed)
            out.ranks.push_back(make_rank(entry, *n, path, kind, int64_t(out.ranks.size())));
          used.insert(node_name(*n));
        }
        continue;
      }
      std::vector<const json*> fresh, shared;
      size_t unschedulable = 0;
      std::vector<std::string> tainted;  // "node (key=value:Effect)"
      std::map<std::string, std::string> selector = entry.node_selector;  // the entry's, and its pods' nodeSelector
      if (limits != nullptr && limits->entry_node_selectors.count(entry.name))
        for (const auto& [k, v] : limits->entry_node_selectors.at(entry.name)) selector[k] = v;
      for (const json* n : sorted) {
        if (!selector_matches(selector, *n)) continue;
        if (!node_is_schedulable(*n)) {
          ++unschedulable;
          continue;
        }
        if (limits != nullptr) {
          json tolerations = limits->entry_tolerations.count(entry.name) ? limits->entry_tolerations.at(entry.name) : json::array();
          if (!limits->gpu_tolerations.empty() && is_gpu_device_class(class_for(entry, *n, path)))
            for (const json& t : limits->gpu_tolerations) tolerations.push_back(t);
          const std::vector<json> bad = untolerated_taints(*n, tolerations);
          if (!bad.empty()) {
            tainted.push_back(node_name(*n) + " (" + taint_text(bad[0]) + ")");
            continue;
          }
        }
        (used.count(node_name(*n)) ? shared : fresh).push_back(n);
      }
      const std::string tolerate = "add a toleration to spec.pool." + std::string(kind) + "[" + std::to_string(e) +
                                   "].podTemplate.tolerations (or spec.podTemplate.tolerations)";
      if (!tainted.empty() && !(fresh.empty() && shared.empty()))
        out.notes.push_back(path + ": skipped nodes with taints the pods do not tolerate: " + joined(tainted) + "; " + tolerate);
      std::vector<const json*> matching = fresh;
      matching.insert(matching.end(), shared.begin(), shared.end());
      const std::string no_nodes = "no node matches " + path + ": nodeSelector " + selector_text(selector) +
                                   (unschedulable ? " (" + std::to_string(unschedulable) + " matching nodes are cordoned or not Ready)"
                                                  : std::string("")) +
                                   ". Label the nodes (kubectl label node NODE KEY=VALUE) or fix the selector";
      if (matching.empty() && !tainted.empty()) {
        const std::string untolerated = "every node matching " + path + " has a taint its pods do not tolerate: " +
                                        joined(tainted) + "; " + tolerate + ", or untaint the nodes";
        if (capacity == nullptr) throw PoolDiscoveryError("UntoleratedTaints", untolerated);
        out.notes.push_back(untolerated);
        continue;
      }
      if (matching.empty()) {
        if (capacity == nullptr) throw PoolDiscoveryError("NoMatchingNodes", no_nodes);
        out.notes.push_back(no_nodes);
        continue;
      }
      // Round-robin over the nodes, skipping nodes whose free GPUs (GPU ranks) or free CPU (CPU
      // ranks) are used up.
      const double cpu_per_rank = limits != nullptr ? limits->cpu_per_rank : 1;
      int64_t placed = 0;
      for (size_t turn = 0; placed < entry.count;) {
        bool progress = false;
        for (size_t k = 0; k < matching.size() && placed < entry.count; ++k, ++turn) {
          const json& node = *matching[turn % matching.size()];
          DiscoveredRank r = make_rank(entry, node, path, kind, int64_t(out.ranks.size()));
          auto gpus = free.find(r.node);
          if (gpus != free.end() && r.gpus > 0) {
            if (gpus->second < r.gpus) continue;
            gpus->second -= r.gpus;
          }
          auto cpus = free_cpus.find(r.node);
          if (cpus != free_cpus.end() && r.gpus == 0 && !is_gpu_device_class(r.device_class)) {
            if (cpus->second + 1e-9 < cpu_per_rank) continue;
            cpus->second -= cpu_per_rank;
          }
          used.insert(r.node);
          out.ranks.push_back(std::move(r));
          ++placed;
          progress = true;
        }
        if (!progress) break;
      }
      if (placed < entry.count) {
        std::string held;  // what each matching node had free
        for (const json* n : matching) {
          const std::string name = node_name(*n);
          std::string part;
          if (limits != nullptr && limits->free_gpus.count(name)) part = std::to_string(limits->free_gpus.at(name)) + " free GPUs";
          else if (capacity != nullptr && capacity->free_gpus.count(name)) part = std::to_string(capacity->free_gpus.at(name)) + " free GPUs";
          if (limits != nullptr && limits->free_cpus.count(name)) {
            char cpu[48];
            std::snprintf(cpu, sizeof cpu, "%.3g free cpu", limits->free_cpus.at(name));
            part += (part.empty() ? "" : ", ") + std::string(cpu);
          }
          if (!part.empty()) held += (held.empty() ? "" : "; ") + name + ": " + part;
        }
        const std::string short_of = path + ": " + std::to_string(placed) + " of " + std::to_string(entry.count) +
                                     " ranks fit (the matching nodes' free nvidia.com/gpu and cpu hold no more" +
                                     (held.empty() ? std::string("") : ": " + held) + ")";
        if (capacity == nullptr) throw PoolDiscoveryError("InsufficientCapacity", short_of + "; waiting for capacity");
        out.notes.push_back(short_of);
      }
    }
  };
  place(pool.training, POOL_KIND_TRAINING);
  place(pool.inference, POOL_KIND_INFERENCE);
  if (capacity != nullptr && capacity->max_ranks > 0 && int64_t(out.ranks.size()) > capacity->max_ranks) {
    out.notes.push_back("the pool offers " + std::to_string(out.ranks.size()) + " ranks; spec.elasticPolicy.maxRanks keeps " +
                        std::to_string(capacity->max_ranks));
    out.ranks.resize(size_t(capacity->max_ranks));
  }
  return out;
}

}  // namespace qsync::reconciler
