// File: tests/kube_api_server/deletion.cpp
// DELETE with finalizers, propagationPolicy and graceful Pod termination, and the garbage
// collector that deletes dependents by ownerReferences and completes foreground deletions.
#include "tests/kube_api_server/deletion.h"

#include <algorithm>
#include <ctime>
#include <set>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/object_writes.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;

const char* kForeground = "foregroundDeletion";
const char* kPods = "/pods";  // the store's key for Pods

std::string rfc3339_in(int64_t seconds) {
  std::time_t t = std::time(nullptr) + seconds;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t grace_period_of(const json& meta) { return meta.value("deletionGracePeriodSeconds", int64_t(0)); }

bool has_owner(const json& object, const std::string& uid) {
  const json* refs = object["metadata"].contains("ownerReferences") ? &object["metadata"]["ownerReferences"] : nullptr;
  if (refs == nullptr || !refs->is_array()) return false;
  return std::any_of(refs->begin(), refs->end(), [&](const json& ref) { return ref.value("uid", "") == uid; });
}


}  // namespace

json delete_object(ApiState& s, const ApiResource& r, const std::string& ns, const std::string& name,
                   const std::string& propagation, std::optional<int64_t> grace_period_seconds) {
  std::string store_ns = r.namespaced ? ns : "";
  const json* found = s.store.get(r.key(), store_ns, name);
  if (found == nullptr) throw not_found_error(resource_label(r), name);
  std::string policy = propagation.empty() ? "Background" : propagation;
  if (policy != "Background" && policy != "Foreground" && policy != "Orphan") {
    throw bad_request_error("propagationPolicy: Unsupported value: \"" + policy +
                            "\": supported values: \"Background\", \"Foreground\", \"Orphan\"");
  }
  json object = *found;
  std::string uid = object["metadata"].value("uid", "");
  bool has_dependents = false;
  for (const auto& [key, other] : s.store.all_refs()) {
    if (!has_owner(*other, uid)) continue;
    has_dependents = true;
    if (policy == "Orphan") {
      json orphan = *other;
      json kept = json::array();
      for (const auto& ref : orphan["metadata"]["ownerReferences"]) {
        if (ref.value("uid", "") != uid) kept.push_back(ref);
      }
      if (kept.empty()) {
        orphan["metadata"].erase("ownerReferences");
      } else {
        orphan["metadata"]["ownerReferences"] = kept;
      }
      s.store.put(key, orphan);
    }
  }
  if (policy == "Orphan") has_dependents = false;
  std::vector<std::string> finalizers = object_finalizers(object);
  if (policy == "Foreground" && has_dependents &&
      std::find(finalizers.begin(), finalizers.end(), kForeground) == finalizers.end()) {
    finalizers.push_back(kForeground);
    object["metadata"]["finalizers"] = finalizers;
  }
  // A Pod's grace period: DeleteOptions', else its spec's (0 in either: removed at once).
  const int64_t grace = r.key() != kPods ? 0
                        : grace_period_seconds.value_or(
                              object.value("spec", json::object()).value("terminationGracePeriodSeconds", int64_t(30)));
  if (grace > 0) {
    if (grace_period_of(object["metadata"]) > 0) {  // already terminating: a shorter period stops it sooner
      if (grace < grace_period_of(object["metadata"]) && s.pod_terminating && s.pod_terminating(object, grace)) {
        object["metadata"]["deletionTimestamp"] = rfc3339_in(grace);
        object["metadata"]["deletionGracePeriodSeconds"] = grace;
      }
      json stored = object == *found ? object : s.store.put(r.key(), object);
      s.changed.notify_all();
      return stored;
    }
    if (!object["metadata"].contains("deletionTimestamp") && s.pod_terminating && s.pod_terminating(object, grace)) {
      object["metadata"]["deletionTimestamp"] = rfc3339_in(grace);
      object["metadata"]["deletionGracePeriodSeconds"] = grace;
      json stored = s.store.put(r.key(), object);
      s.changed.notify_all();
      collect_garbage(s);
      return stored;
    }
  }
  if (!finalizers.empty()) {
    if (!object["metadata"].contains("deletionTimestamp")) object["metadata"]["deletionTimestamp"] = rfc3339_now();
    object["metadata"]["deletionGracePeriodSeconds"] = 0;  // removing the last finalizer removes it
    json stored = object == *found ? object : s.store.put(r.key(), object);
    s.changed.notify_all();
    collect_garbage(s);
    return stored;
  }
  json removed = remove_object(s, r, store_ns, name);
  collect_garbage(s);
  return removed;
}

void finish_pod_termination(ApiState& s, const std::string& ns, const std::string& name, const std::string& uid) {
  const json* found = s.store.get(kPods, ns, name);
  if (found == nullptr || (*found)["metadata"].value("uid", "") != uid || !(*found)["metadata"].contains("deletionTimestamp"))
    return;
  const ApiResource* r = s.registry.find_by_key(kPods);
  if (r == nullptr) return;
  if (object_finalizers(*found).empty()) {
    remove_object(s, *r, ns, name);
  } else {
    json held = *found;
    held["metadata"]["deletionGracePeriodSeconds"] = 0;  // finalizers remain: their removal removes it
    s.store.put(kPods, held);
  }
  collect_garbage(s);
}

void collect_garbage(ApiState& s) {
  if (s.gc_running) return;
  s.gc_running = true;
  try {
    for (bool progress = true; progress;) {
      progress = false;
      auto all = s.store.all_refs();
      std::set<std::string> live_owners, deleting_in_foreground;
      for (const auto& [key, object] : all) {
        const json& meta = (*object)["metadata"];
        std::string uid = meta.value("uid", "");
        auto f = object_finalizers(*object);
        if (meta.contains("deletionTimestamp") && std::find(f.begin(), f.end(), kForeground) != f.end()) {
          deleting_in_foreground.insert(uid);
        } else {
          live_owners.insert(uid);
        }
      }
      // Dependents whose owners are all gone or going.
      for (const auto& [key, object] : all) {
        const json& meta = (*object)["metadata"];
        if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array() || meta["ownerReferences"].empty() ||
            meta.contains("deletionTimestamp")) {
          continue;
        }
        bool owned = std::any_of(meta["ownerReferences"].begin(), meta["ownerReferences"].end(),
                                 [&](const json& ref) { return live_owners.count(ref.value("uid", "")) > 0; });
        const ApiResource* r = s.registry.find_by_key(key);
        if (owned || r == nullptr) continue;
        delete_object(s, *r, meta.value("namespace", ""), meta.value("name", ""), "Background");
        progress = true;
        break;
      }
      if (progress) continue;
      // Foreground deletions whose dependents are all gone.
      for (const auto& [key, object] : all) {
        std::string uid = (*object)["metadata"].value("uid", "");
        if (deleting_in_foreground.count(uid) == 0) continue;
        bool waiting = std::any_of(all.begin(), all.end(), [&](const auto& other) { return has_owner(*other.second, uid); });
        if (waiting) continue;
        json next = *object;
        auto f = object_finalizers(next);
        f.erase(std::remove(f.begin(), f.end(), kForeground), f.end());
        const ApiResource* r = s.registry.find_by_key(key);
        if (r == nullptr) continue;
        std::string ns = next["metadata"].value("namespace", ""), name = next["metadata"].value("name", "");
        if (f.empty()) {
          next["metadata"].erase("finalizers");
          s.store.put(key, next);
          remove_object(s, *r, ns, name);
        } else {
          next["metadata"]["finalizers"] = f;
          s.store.put(key, next);
        }
        progress = true;
        break;
      }
    }
  } catch (...) {
    s.gc_running = false;
    throw;
  }
  s.gc_running = false;
  s.changed.notify_all();
}

}  // namespace qsync::kube_test
