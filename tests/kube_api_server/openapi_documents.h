// File: tests/kube_api_server/openapi_documents.h
// The OpenAPI v3 documents kubectl 1.32 reads before `kubectl apply` / `create`: the root
// (/openapi/v3: one serverRelativeURL per group/version) and each group/version's document,
// whose PATCH operations carry x-kubernetes-group-version-kind and list the fieldValidation
// query parameter, so kubectl leaves validation to the server (as with a real API server)
// instead of validating client-side against /openapi/v2. Component schemas are not served.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/resource_registry.h"

namespace qsync::kube_test {

nlohmann::json openapi_v3_root(const ResourceRegistry& registry);
// `gv_path` is "api/v1" or "apis/GROUP/VERSION"; null when no such group/version is served.
nlohmann::json openapi_v3_document(const ResourceRegistry& registry, const std::string& gv_path);

}  // namespace qsync::kube_test
