// File: tests/kube_api_server/resource_registry.h
// The resource types the test API server serves: the built-in ones (Pods, Services, Secrets,
// ConfigMaps, Events, Nodes, Namespaces, Leases, CustomResourceDefinitions, apps/v1
// Deployments and StatefulSets (with /scale; workload_controllers.h runs them when the
// server's controllers are on), and what a Helm chart installs: ServiceAccounts,
// rbac.authorization.k8s.io/v1 Roles, ClusterRoles and their bindings, stored as given) and those that
// creating a CustomResourceDefinition registers. It also writes the discovery documents
// (/api, /apis, /apis/GROUP, /api/v1 and /apis/GROUP/VERSION). Not thread-safe: the server
// holds its lock around every call.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/crd_schema.h"

namespace qsync::kube_test {

struct ApiResource {
  std::string group;                  // "" for core
  std::vector<std::string> versions;  // served versions
  std::string storage_version;
  std::string plural, singular, kind, list_kind;
  bool namespaced = true;
  std::vector<std::string> short_names, categories;
  bool status_subresource = false;
  bool scale_subresource = false;  // NAME/scale (autoscaling/v1 Scale): Deployments, StatefulSets
  bool custom = false;                        // registered by a CRD
  std::string crd_name;                       // plural.group for custom resources
  std::map<std::string, nlohmann::json> schemas;          // version -> openAPIV3Schema
  std::map<std::string, nlohmann::json> printer_columns;  // version -> additionalPrinterColumns

  std::string key() const { return group + "/" + plural; }  // the store's key
  bool serves(const std::string& version) const;
  std::string api_version(const std::string& version) const;  // "v1" or "group/v1"
};

class ResourceRegistry {
 public:
  ResourceRegistry();  // the built-in types

  // The type served at GROUP/VERSION/PLURAL, or null.
  const ApiResource* find(const std::string& group, const std::string& version, const std::string& plural) const;
  const ApiResource* find_by_key(const std::string& key) const;
  // The type whose kind is `kind` in `api_version` ("v1", "apps/v1"), or null.
  const ApiResource* find_kind(const std::string& api_version, const std::string& kind) const;
  std::vector<const ApiResource*> all() const;

  // Registers (or re-registers, after an update) the type a CRD declares. Throws
  // std::invalid_argument when its plural clashes with a built-in type.
  void register_crd(const CrdInfo& crd);
  void unregister_crd(const std::string& crd_name);

  nlohmann::json core_api_versions(const std::string& server_address) const;  // GET /api
  nlohmann::json api_group_list() const;                                     // GET /apis
  nlohmann::json api_group(const std::string& group) const;                  // null if unknown
  nlohmann::json api_resource_list(const std::string& group, const std::string& version) const;  // null if unknown
  // Every served group/version pair ("" group for core).
  std::vector<std::pair<std::string, std::string>> group_versions() const;

 private:
  std::map<std::string, ApiResource> types_;  // by key()
};

}  // namespace qsync::kube_test
