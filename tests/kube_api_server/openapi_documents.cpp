// File: tests/kube_api_server/openapi_documents.cpp
// Minimal OpenAPI v3 documents: paths with PATCH operations tagged by group/version/kind.
#include "tests/kube_api_server/openapi_documents.h"

#include <functional>
#include <sstream>

namespace qsync::kube_test {
namespace {

using nlohmann::json;

std::string gv_path_of(const std::string& group, const std::string& version) {
  return group.empty() ? "api/" + version : "apis/" + group + "/" + version;
}

json query_parameter(const std::string& name) {
  return {{"name", name}, {"in", "query"}, {"schema", {{"type", "string"}, {"uniqueItems", true}}}};
}

}  // namespace

json openapi_v3_root(const ResourceRegistry& registry) {
  json paths = json::object();
  for (const auto& [group, version] : registry.group_versions()) {
    std::string gv = gv_path_of(group, version);
    json doc = openapi_v3_document(registry, gv);
    std::ostringstream hash;
    hash << std::hex << std::hash<std::string>{}(doc.dump());
    paths[gv] = {{"serverRelativeURL", "/openapi/v3/" + gv + "?hash=" + hash.str()}};
  }
  return {{"paths", paths}};
}

json openapi_v3_document(const ResourceRegistry& registry, const std::string& gv_path) {
  json paths = json::object();
  bool found = false;
  for (const ApiResource* r : registry.all()) {
    for (const auto& version : r->versions) {
      if (gv_path_of(r->group, version) != gv_path) continue;
      found = true;
      json gvk = {{"group", r->group}, {"version", version}, {"kind", r->kind}};
      json patch = {{"operationId", "patch" + r->kind},
                    {"parameters",
                     {query_parameter("dryRun"), query_parameter("fieldManager"), query_parameter("fieldValidation"),
                      query_parameter("force")}},
                    {"responses", {{"200", {{"description", "OK"}}}}},
                    {"x-kubernetes-action", "patch"},
                    {"x-kubernetes-group-version-kind", gvk}};
      std::string base = "/" + gv_path + (r->namespaced ? "/namespaces/{namespace}/" : "/") + r->plural + "/{name}";
      paths[base] = {{"patch", patch}};
      if (r->status_subresource) paths[base + "/status"] = {{"patch", patch}};
    }
  }
  if (!found) return nullptr;
  return {{"openapi", "3.0.0"},
          {"info", {{"title", "Kubernetes"}, {"version", "v1.32.0"}}},
          {"paths", paths},
          {"components", {{"schemas", json::object()}}}};
}

}  // namespace qsync::kube_test
