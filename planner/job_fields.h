// File: planner/job_fields.h
// The job's fields as one table: every field of a HybridTrainingJob's spec with its path, type,
// default, allowed values, bounds and description. It is the job schema of the whole project:
// the CRD's openAPIV3Schema is generated from it (operator/api/crd_schema.h), and the one job
// parser (planner/job_spec.h), which `qsync run`, `qsync-plan` and the operator all use, defaults
// and validates through it (job_field_validation.h). So the YAML the API server enforces, the job
// files `qsync run` reads and the types everyone uses cannot drift apart. (The operator's status
// fields use the same Field type: operator/api/status_fields.h.)
//
//   Field::integer("spec.globalBatch", "Samples per step over all ranks.").with_default(128).at_least(1)
//   Field::array("spec.pool.training", "...")   then   Field::string("spec.pool.training[].name", ...)
//
// Paths are dotted from the object's root; "x[]" steps into the items of the array x.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync {

enum class FieldType {
  STRING,
  INTEGER,
  NUMBER,
  BOOLEAN,
  DATE_TIME,     // an RFC 3339 string
  OBJECT,        // properties come from the fields below it
  ARRAY,         // of objects: the item's properties come from "path[].x" fields
  STRING_MAP,    // string -> string (labels, node selectors)
  QUANTITY_MAP,  // string -> Kubernetes quantity, an integer or a string ("2", "500m", "4Gi")
};

struct Field {
  std::string path;
  FieldType type = FieldType::STRING;
  std::string description;
  nlohmann::json default_value;      // null: no default
  std::vector<std::string> allowed;  // enum values (strings)
  std::optional<double> minimum;
  bool exclusive_minimum = false;
  std::optional<int64_t> min_length;
  std::string pattern;      // ECMAScript regex for strings
  std::string format_hint;  // what the pattern means, for messages: "a duration such as 250ms"
  bool required = false;    // required in its parent object
  std::vector<std::pair<std::string, std::string>> rules;  // CEL {rule, message} (real API servers only)
  std::vector<std::string> list_map_keys;  // an ARRAY keyed like a map (x-kubernetes-list-type: map)
  // An OBJECT (or an ARRAY's items) that keeps fields the table does not list
  // (x-kubernetes-preserve-unknown-fields): a Kubernetes type taken whole (affinity, volumes).
  bool open_object = false;

  static Field string(std::string path, std::string description);
  static Field integer(std::string path, std::string description);
  static Field number(std::string path, std::string description);
  static Field boolean(std::string path, std::string description);
  static Field date_time(std::string path, std::string description);
  static Field object(std::string path, std::string description);
  static Field array(std::string path, std::string description);
  static Field string_map(std::string path, std::string description);
  static Field quantity_map(std::string path, std::string description);

  Field with_default(nlohmann::json value) &&;
  Field one_of(std::vector<std::string> values) &&;
  Field at_least(double value) &&;
  Field above(double value) &&;  // exclusive minimum
  Field non_empty() &&;          // minLength 1: an empty string means "absent"
  Field matching(std::string regex, std::string hint) &&;
  Field mandatory() &&;
  Field with_rule(std::string cel, std::string message) &&;
  Field keyed_by(std::vector<std::string> keys) &&;
  Field open() &&;
};

// Patterns shared by the table and the messages.
inline constexpr const char* DURATION_PATTERN = R"(^[0-9]+(\.[0-9]+)?(us|ms|s|m)?$)";
inline constexpr const char* QUANTITY_PATTERN =
    R"(^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$)";

// Every field of .spec, parents before children.
const std::vector<Field>& job_spec_fields();

}  // namespace qsync
