// File: tests/kube_api_server/crd_schema.h
// What the API server takes from an apiextensions.k8s.io/v1 CustomResourceDefinition (names,
// scope, versions, status subresource, printer columns) and what it does with a version's
// openAPIV3Schema to every custom object written: prune unknown fields, apply defaults, then
// validate, with error messages in the API server's words, e.g.
//   spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0
//   spec.mode: Unsupported value: "x": supported values: "a", "b"
//   spec.model: Required value
// Supported keywords: type, required, properties, additionalProperties (schema or bool), items,
// enum, minimum/maximum/exclusiveMinimum/exclusiveMaximum, minLength/maxLength, pattern
// (ECMAScript regex), minItems/maxItems, format date-time, nullable, default,
// x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields and
// x-kubernetes-embedded-resource (apiVersion and kind required, metadata kept). Not modelled:
// allOf/anyOf/oneOf/not, x-kubernetes-validations (CEL), list-type/map-type markers, uniqueItems.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

using json = nlohmann::json;

struct CrdVersion {
  std::string name;  // "v1alpha1"
  bool served = true, storage = false;
  json schema;  // openAPIV3Schema; null when the version has none
  bool status_subresource = false;
  json printer_columns = json::array();  // additionalPrinterColumns: {name, type, jsonPath, ...}
};

struct CrdInfo {
  std::string name;  // plural.group
  std::string group, kind, list_kind, plural, singular;
  std::vector<std::string> short_names, categories;
  bool namespaced = true;
  std::vector<CrdVersion> versions;

  const CrdVersion* version(const std::string& v) const;  // nullptr when not defined
};

// Reads an apiextensions.k8s.io/v1 CustomResourceDefinition. Throws std::invalid_argument with a
// field error in the API server's form, a cause for its 422 ("spec.group: Required value",
// "metadata.name: Invalid value: ...: must be spec.names.plural+\".\"+spec.group", exactly one
// storage version, spec.scope Namespaced or Cluster, ...). listKind defaults to <kind>List and
// singular to the lower-cased kind.
CrdInfo crd_info_from_json(const json& crd);

// The schema violations of `value` (a whole custom object), empty when valid. At the root,
// apiVersion, kind and metadata are checked for type only: the server handles metadata.
std::vector<std::string> schema_validate(const json& schema, const json& value);

// Structural defaulting: every absent (or null, when not nullable) property with a default gets
// it, then defaulting recurses into the object's present properties, additionalProperties values
// and array items. Defaults inside an absent parent object are not created.
void schema_apply_defaults(const json& schema, json& value);

// Drops object fields the schema does not declare, except under additionalProperties or
// x-kubernetes-preserve-unknown-fields; apiVersion, kind and metadata stay at the root and in
// embedded resources. A null or empty schema prunes nothing.
void schema_prune_unknown(const json& schema, json& value);

}  // namespace qsync::kube_test
