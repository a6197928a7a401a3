// File: tests/kube_api_server/resource_registry.cpp
// Built-in resource types, CRD registration and the discovery documents kubectl reads to map
// a kind or short name ("hjob") to a REST path.
#include "tests/kube_api_server/resource_registry.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace qsync::kube_test {
namespace {

using nlohmann::json;

ApiResource builtin(const std::string& group, const std::string& plural, const std::string& singular,
                    const std::string& kind, bool namespaced, std::vector<std::string> short_names,
                    bool status_subresource) {
  ApiResource r;
  r.group = group;
  r.versions = {"v1"};
  r.storage_version = "v1";
  r.plural = plural;
  r.singular = singular;
  r.kind = kind;
  r.list_kind = kind + "List";
  r.namespaced = namespaced;
  r.short_names = std::move(short_names);
  r.status_subresource = status_subresource;
  return r;
}

const json kVerbs = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"};

}  // namespace

bool ApiResource::serves(const std::string& version) const {
  return std::find(versions.begin(), versions.end(), version) != versions.end();
}

std::string ApiResource::api_version(const std::string& version) const {
  return group.empty() ? version : group + "/" + version;
}

ResourceRegistry::ResourceRegistry() {
  for (ApiResource r : {
           builtin("", "pods", "pod", "Pod", true, {"po"}, true),
           builtin("", "services", "service", "Service", true, {"svc"}, true),
           builtin("", "configmaps", "configmap", "ConfigMap", true, {"cm"}, false),
           builtin("", "secrets", "secret", "Secret", true, {}, false),
           builtin("", "events", "event", "Event", true, {"ev"}, false),
           builtin("", "nodes", "node", "Node", false, {"no"}, true),
           builtin("", "namespaces", "namespace", "Namespace", false, {"ns"}, true),
           builtin("coordination.k8s.io", "leases", "lease", "Lease", true, {}, false),
           // What a Helm chart installs (generic storage: no controllers run them).
           builtin("", "serviceaccounts", "serviceaccount", "ServiceAccount", true, {"sa"}, false),
           builtin("apps", "deployments", "deployment", "Deployment", true, {"deploy"}, true),
           builtin("apps", "statefulsets", "statefulset", "StatefulSet", true, {"sts"}, true),
           builtin("rbac.authorization.k8s.io", "clusterroles", "clusterrole", "ClusterRole", false, {}, false),
           builtin("rbac.authorization.k8s.io", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding",
                   false, {}, false),
           builtin("rbac.authorization.k8s.io", "roles", "role", "Role", true, {}, false),
           builtin("rbac.authorization.k8s.io", "rolebindings", "rolebinding", "RoleBinding", true, {}, false),
           builtin("apiextensions.k8s.io", "customresourcedefinitions", "customresourcedefinition",
                   "CustomResourceDefinition", false, {"crd", "crds"}, true),
       }) {
    if (r.plural == "pods" || r.plural == "services" || r.plural == "deployments" || r.plural == "statefulsets")
      r.categories = {"all"};
    r.scale_subresource = r.plural == "deployments" || r.plural == "statefulsets";
    auto column = [](const char* name, const char* type, const char* path) {
      return json{{"name", name}, {"type", type}, {"jsonPath", path}};
    };
    json age = column("Age", "date", ".metadata.creationTimestamp");
    if (r.plural == "pods") {
      r.printer_columns["v1"] = {column("Status", "string", ".status.phase"), column("IP", "string", ".status.podIP"),
                                 column("Node", "string", ".spec.nodeName"), age};
    } else if (r.plural == "namespaces") {
      r.printer_columns["v1"] = {column("Status", "string", ".status.phase"), age};
    }
    types_[r.key()] = r;
  }
}

const ApiResource* ResourceRegistry::find(const std::string& group, const std::string& version,
                                          const std::string& plural) const {
  auto it = types_.find(group + "/" + plural);
  return it != types_.end() && it->second.serves(version) ? &it->second : nullptr;
}

const ApiResource* ResourceRegistry::find_by_key(const std::string& key) const {
  auto it = types_.find(key);
  return it == types_.end() ? nullptr : &it->second;
}

const ApiResource* ResourceRegistry::find_kind(const std::string& api_version, const std::string& kind) const {
  size_t slash = api_version.find('/');
  std::string group = slash == std::string::npos ? "" : api_version.substr(0, slash);
  std::string version = slash == std::string::npos ? api_version : api_version.substr(slash + 1);
  for (const auto& [key, r] : types_) {
    if (r.group == group && r.kind == kind && r.serves(version)) return &r;
  }
  return nullptr;
}

std::vector<const ApiResource*> ResourceRegistry::all() const {
  std::vector<const ApiResource*> out;
  for (const auto& [key, r] : types_) out.push_back(&r);
  return out;
}

void ResourceRegistry::register_crd(const CrdInfo& crd) {
  ApiResource r;
  r.group = crd.group;
  r.plural = crd.plural;
  r.singular = crd.singular.empty() ? crd.kind : crd.singular;
  std::transform(r.singular.begin(), r.singular.end(), r.singular.begin(), ::tolower);
  r.kind = crd.kind;
  r.list_kind = crd.list_kind.empty() ? crd.kind + "List" : crd.list_kind;
  r.namespaced = crd.namespaced;
  r.short_names = crd.short_names;
  r.categories = crd.categories;
  r.custom = true;
  r.crd_name = crd.name;
  for (const CrdVersion& v : crd.versions) {
    if (v.storage) r.storage_version = v.name;
    if (!v.served) continue;
    r.versions.push_back(v.name);
    r.schemas[v.name] = v.schema;
    r.printer_columns[v.name] = v.printer_columns;
    r.status_subresource = r.status_subresource || v.status_subresource;
  }
  if (r.storage_version.empty() && !r.versions.empty()) r.storage_version = r.versions.front();
  auto existing = types_.find(r.key());
  if (existing != types_.end() && !existing->second.custom) {
    throw std::invalid_argument("spec.names.plural: Invalid value: \"" + r.plural + "\": clashes with the built-in " +
                                existing->second.kind + " resource; choose another plural or group");
  }
  types_[r.key()] = r;
}

void ResourceRegistry::unregister_crd(const std::string& crd_name) {
  for (auto it = types_.begin(); it != types_.end(); ++it) {
    if (it->second.custom && it->second.crd_name == crd_name) {
      types_.erase(it);
      return;
    }
  }
}

json ResourceRegistry::core_api_versions(const std::string& server_address) const {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs", {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

json ResourceRegistry::api_group(const std::string& group) const {
  std::vector<std::string> versions;
  std::string preferred;
  for (const auto& [key, r] : types_) {
    if (r.group != group) continue;
    for (const auto& v : r.versions) {
      if (std::find(versions.begin(), versions.end(), v) == versions.end()) versions.push_back(v);
    }
    if (preferred.empty() || r.storage_version == "v1") preferred = r.storage_version;
  }
  if (versions.empty() || group.empty()) return nullptr;
  json out = {{"kind", "APIGroup"}, {"apiVersion", "v1"}, {"name", group}, {"versions", json::array()}};
  for (const auto& v : versions) out["versions"].push_back({{"groupVersion", group + "/" + v}, {"version", v}});
  out["preferredVersion"] = {{"groupVersion", group + "/" + preferred}, {"version", preferred}};
  return out;
}

json ResourceRegistry::api_group_list() const {
  json out = {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", json::array()}};
  std::set<std::string> groups;
  for (const auto& [key, r] : types_) {
    if (!r.group.empty()) groups.insert(r.group);
  }
  for (const auto& g : groups) {
    json group = api_group(g);
    group.erase("kind");
    group.erase("apiVersion");
    out["groups"].push_back(group);
  }
  return out;
}

json ResourceRegistry::api_resource_list(const std::string& group, const std::string& version) const {
  json resources = json::array();
  for (const auto& [key, r] : types_) {
    if (r.group != group || !r.serves(version)) continue;
    json entry = {{"name", r.plural},     {"singularName", r.singular}, {"namespaced", r.namespaced},
                  {"kind", r.kind},       {"verbs", kVerbs},            {"storageVersionHash", ""}};
    if (!r.short_names.empty()) entry["shortNames"] = r.short_names;
    if (!r.categories.empty()) entry["categories"] = r.categories;
    resources.push_back(entry);
    if (r.status_subresource) {
      resources.push_back({{"name", r.plural + "/status"},
                           {"singularName", ""},
                           {"namespaced", r.namespaced},
                           {"kind", r.kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
    if (r.scale_subresource) {
      resources.push_back({{"name", r.plural + "/scale"},
                           {"singularName", ""},
                           {"namespaced", r.namespaced},
                           {"group", "autoscaling"},
                           {"version", "v1"},
                           {"kind", "Scale"},
                           {"verbs", {"get", "patch", "update"}}});
    }
  }
  if (resources.empty()) return nullptr;
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group.empty() ? version : group + "/" + version},
          {"resources", resources}};
}

std::vector<std::pair<std::string, std::string>> ResourceRegistry::group_versions() const {
  std::set<std::pair<std::string, std::string>> out;
  for (const auto& [key, r] : types_) {
    for (const auto& v : r.versions) out.insert({r.group, v});
  }
  return {out.begin(), out.end()};
}

}  // namespace qsync::kube_test
