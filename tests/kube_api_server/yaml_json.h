// File: tests/kube_api_server/yaml_json.h
// YAML to JSON for the test API server: `kubectl apply --server-side` sends its object as
// application/apply-patch+yaml, and YAML is a superset of JSON, so any body can come through
// here. Scalars become JSON strings unless they are plain (unquoted) YAML numbers, booleans or
// null, as in Kubernetes' own sigs.k8s.io/yaml conversion.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

// Parses one YAML document into JSON. Throws std::invalid_argument with the parser's line and
// column when the text is not YAML.
nlohmann::json yaml_to_json(const std::string& text);

// Every document of a multi-document YAML stream ("---" separated), empty ones skipped.
std::vector<nlohmann::json> yaml_documents_to_json(const std::string& text);

}  // namespace qsync::kube_test
