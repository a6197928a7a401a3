// File: tests/kube_api_server/object_writes.cpp
// Create, update and final removal with kube-apiserver's semantics, with the side effects of
// CRDs (registration, status conditions), Namespaces (Active, cascade) and Pods (local kubelet).
#include "tests/kube_api_server/object_writes.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <stdexcept>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/crd_schema.h"
#include "tests/kube_api_server/deletion.h"
#include "tests/kube_api_server/pod_scheduler.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;

const char* kCrdKey = "apiextensions.k8s.io/customresourcedefinitions";
const char* kNamespaceKey = "/namespaces";
const char* kPodKey = "/pods";

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

std::string make_uid() {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out.push_back('-');
    out.push_back(hex[rng()() % 16]);
  }
  return out;
}

std::string random_suffix() {
  static const char* chars = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (int i = 0; i < 5; ++i) out.push_back(chars[rng()() % 27]);
  return out;
}

json spec_part(const json& object) {
  json out = object;
  out.erase("metadata");
  out.erase("status");
  return out;
}

// Prunes, defaults and validates a custom object against its version's schema.
// Dotted paths of the object fields in `before` that pruning removed.
void collect_pruned(const json& before, const json& after, const std::string& prefix, std::vector<std::string>& out) {
  if (!before.is_object()) return;
  for (const auto& [key, value] : before.items()) {
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (!after.is_object() || !after.contains(key)) {
      out.push_back(path);
    } else {
      collect_pruned(value, after[key], path, out);
    }
  }
}

void apply_schema(const ApiResource& r, const std::string& version, json& object, const WriteOptions& options) {
  if (!r.custom) return;
  auto it = r.schemas.find(r.serves(version) ? version : r.storage_version);
  if (it == r.schemas.end() || it->second.is_null()) return;
  json metadata = object["metadata"];
  json sent = options.strict_fields ? object : json(nullptr);
  schema_prune_unknown(it->second, object);
  if (options.strict_fields) {
    std::vector<std::string> unknown;
    collect_pruned(sent, object, "", unknown);
    unknown.erase(std::remove_if(unknown.begin(), unknown.end(), [](const std::string& f) { return f.rfind("metadata", 0) == 0; }),
                  unknown.end());
    if (!unknown.empty()) {
      std::string message = r.kind + " in version \"" + version + "\" cannot be handled as a " + r.kind + ": strict decoding error: ";
      for (size_t i = 0; i < unknown.size(); ++i) message += (i ? ", " : "") + ("unknown field \"" + unknown[i] + "\"");
      throw bad_request_error(message);
    }
  }
  schema_apply_defaults(it->second, object);
  object["metadata"] = metadata;
  object["apiVersion"] = r.api_version(version);
  object["kind"] = r.kind;
  auto errors = schema_validate(it->second, object);
  if (!errors.empty()) throw invalid_error(r.kind, metadata.value("name", ""), errors);
}

// Reads a CRD being written, registers its type and fills in its status.
void admit_crd(ApiState& s, json& crd) {
  CrdInfo info;
  try {
    info = crd_info_from_json(crd);
  } catch (const std::invalid_argument& e) {
    throw invalid_error("CustomResourceDefinition", crd["metadata"].value("name", ""), {e.what()});
  }
  try {
    s.registry.register_crd(info);
  } catch (const std::invalid_argument& e) {
    throw invalid_error("CustomResourceDefinition", info.name, {e.what()});
  }
  std::string now = rfc3339_now();
  std::string storage;
  for (const auto& v : info.versions) {
    if (v.storage) storage = v.name;
  }
  json accepted = {{"plural", info.plural}, {"singular", info.singular}, {"kind", info.kind}, {"listKind", info.list_kind}};
  if (!info.short_names.empty()) accepted["shortNames"] = info.short_names;
  if (!info.categories.empty()) accepted["categories"] = info.categories;
  crd["status"] = {
      {"conditions",
       {{{"type", "NamesAccepted"}, {"status", "True"}, {"reason", "NoConflicts"}, {"message", "no conflicts found"},
         {"lastTransitionTime", now}},
        {{"type", "Established"}, {"status", "True"}, {"reason", "InitialNamesAccepted"},
         {"message", "the initial names have been accepted"}, {"lastTransitionTime", now}}}},
      {"acceptedNames", accepted},
      {"storedVersions", {storage}}};
}

}  // namespace

std::string rfc3339_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> object_finalizers(const json& object) {
  std::vector<std::string> out;
  const json& meta = object["metadata"];
  if (meta.contains("finalizers") && meta["finalizers"].is_array()) {
    for (const auto& f : meta["finalizers"]) out.push_back(f.get<std::string>());
  }
  return out;
}


json remove_object(ApiState& s, const ApiResource& r, const std::string& ns, const std::string& name) {
  json removed = s.store.remove(r.key(), ns, name);
  if (removed.is_null()) return removed;
  if (r.key() == kPodKey && s.pod_removed) s.pod_removed(removed);
  if (r.key() == kCrdKey) {
    for (const ApiResource* custom : s.registry.all()) {
      if (!custom->custom || custom->crd_name != name) continue;
      std::string key = custom->key();
      for (const json& o : s.store.list(key, "")) s.store.remove(key, o["metadata"].value("namespace", ""), o["metadata"].value("name", ""));
      break;
    }
    s.registry.unregister_crd(name);
  }
  if (r.key() == kNamespaceKey) {
    for (const auto& [key, object] : s.store.all()) {
      if (object["metadata"].value("namespace", "") != name) continue;
      const ApiResource* child = s.registry.find_by_key(key);
      if (child != nullptr) remove_object(s, *child, name, object["metadata"].value("name", ""));
    }
  }
  s.changed.notify_all();
  return removed;
}

std::string resource_label(const ApiResource& r) { return r.group.empty() ? r.plural : r.plural + "." + r.group; }

json served_object(const ApiResource& r, json object, const std::string& version) {
  if (object.is_object()) object["apiVersion"] = r.api_version(r.serves(version) ? version : r.storage_version);
  return object;
}

json create_object(ApiState& s, const ApiResource& r, const std::string& version, const std::string& ns, json object,
                   const WriteOptions& options) {
  if (!object.is_object()) throw bad_request_error("the request body must be a JSON object of kind " + r.kind);
  if (!object["metadata"].is_object()) object["metadata"] = json::object();
  json& meta = object["metadata"];
  if (r.namespaced) {
    if (ns.empty()) throw bad_request_error("a namespace is required to create " + resource_label(r));
    if (meta.contains("namespace") && meta["namespace"] != "" && meta["namespace"] != ns) {
      throw bad_request_error("the namespace of the provided object does not match the namespace sent on the request");
    }
    meta["namespace"] = ns;
    if (s.store.get(kNamespaceKey, "", ns) == nullptr) throw not_found_error("namespaces", ns);
  } else {
    meta.erase("namespace");
  }
  std::string name = meta.value("name", "");
  if (name.empty()) {
    std::string prefix = meta.value("generateName", "");
    if (prefix.empty()) throw invalid_error(r.kind, "", {"metadata.name: Required value: name or generateName is required"});
    do {
      name = prefix + random_suffix();
    } while (s.store.get(r.key(), ns, name) != nullptr);
    meta["name"] = name;
  }
  if (s.store.get(r.key(), r.namespaced ? ns : "", name) != nullptr) throw already_exists_error(resource_label(r), name);
  object["apiVersion"] = r.api_version(version);
  object["kind"] = r.kind;
  if (r.custom && r.status_subresource) object.erase("status");
  apply_schema(r, version, object, options);
  json& m = object["metadata"];
  m["uid"] = make_uid();
  m["creationTimestamp"] = rfc3339_now();
  m["generation"] = 1;
  m.erase("resourceVersion");
  m.erase("deletionTimestamp");
  m.erase("deletionGracePeriodSeconds");
  if (r.key() == kCrdKey) admit_crd(s, object);
  if (r.key() == kNamespaceKey) object["status"] = {{"phase", "Active"}};
  object["apiVersion"] = r.api_version(r.storage_version);
  json stored = s.store.put(r.key(), object);
  // A Pod waiting for the scheduler reaches the kubelet once it is bound (pod_scheduler.h).
  if (r.key() == kPodKey && s.pod_added && !pod_needs_scheduling(s, stored)) s.pod_added(stored);
  s.changed.notify_all();
  return stored;
}

json update_object(ApiState& s, const ApiResource& r, const std::string& version, const std::string& ns,
                   const std::string& name, json object, WriteTarget target, bool allow_create,
                   const WriteOptions& options) {
  std::string store_ns = r.namespaced ? ns : "";
  const json* found = s.store.get(r.key(), store_ns, name);
  if (found == nullptr) {
    if (allow_create && target == WriteTarget::main) return create_object(s, r, version, store_ns, std::move(object), options);
    throw not_found_error(resource_label(r), name);
  }
  const json live = *found;
  if (!object.is_object()) throw bad_request_error("the request body must be a JSON object of kind " + r.kind);
  if (!object["metadata"].is_object()) object["metadata"] = json::object();
  std::string sent_rv = object["metadata"].value("resourceVersion", "");
  if (!sent_rv.empty() && sent_rv != live["metadata"].value("resourceVersion", "")) throw conflict_error(resource_label(r), name);
  std::string sent_name = object["metadata"].value("name", "");
  if (!sent_name.empty() && sent_name != name) {
    throw bad_request_error("the name of the object (" + sent_name + ") does not match the name on the URL (" + name + ")");
  }

  json next;
  if (target == WriteTarget::status) {
    next = live;
    if (object.contains("status")) {
      next["status"] = object["status"];
    } else {
      next.erase("status");
    }
  } else {
    next = object;
    if (r.status_subresource) {
      if (live.contains("status")) {
        next["status"] = live["status"];
      } else {
        next.erase("status");
      }
    }
    json& m = next["metadata"];
    for (const char* field : {"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"}) {
      if (live["metadata"].contains(field)) {
        m[field] = live["metadata"][field];
      } else {
        m.erase(field);
      }
    }
    if (!m.contains("managedFields") && live["metadata"].contains("managedFields")) m["managedFields"] = live["metadata"]["managedFields"];
    m["name"] = name;
    if (r.namespaced) {
      m["namespace"] = store_ns;
    } else {
      m.erase("namespace");
    }
    if (live["metadata"].contains("deletionTimestamp")) {
      // Finalizers may only be removed once deletion started: new ones are not added.
      std::vector<std::string> before = object_finalizers(live), after = object_finalizers(next);
      std::vector<std::string> kept;
      for (const auto& f : after) {
        if (std::find(before.begin(), before.end(), f) != before.end()) kept.push_back(f);
      }
      if (kept.empty()) {
        m.erase("finalizers");
      } else {
        m["finalizers"] = kept;
      }
    }
  }
  next["apiVersion"] = r.api_version(version);
  next["kind"] = r.kind;
  apply_schema(r, version, next, options);
  if (r.key() == kCrdKey && target == WriteTarget::main) admit_crd(s, next);
  next["apiVersion"] = r.api_version(r.storage_version);
  json& m = next["metadata"];
  if (spec_part(next) != spec_part(live)) m["generation"] = live["metadata"].value("generation", 1) + 1;
  m["resourceVersion"] = live["metadata"]["resourceVersion"];
  if (next == live) return live;  // a no-op write keeps the resourceVersion, as kube-apiserver does
  m.erase("resourceVersion");
  json stored = s.store.put(r.key(), next);
  s.changed.notify_all();
  if (stored["metadata"].contains("deletionTimestamp")) {
    // A Pod in graceful termination (deletionGracePeriodSeconds > 0) waits for the kubelet.
    if (object_finalizers(stored).empty() && stored["metadata"].value("deletionGracePeriodSeconds", int64_t(0)) == 0) {
      json removed = remove_object(s, r, store_ns, name);
      collect_garbage(s);
      return removed;
    }
    collect_garbage(s);
  }
  return stored;
}

}  // namespace qsync::kube_test
