// File: planner/job_field_validation.h
// The C++ side of the CRD's schema: defaults and checks driven by the same field table the
// openAPIV3Schema is generated from (planner/job_fields.h), so a manifest the operator parses meets the
// same rules the API server enforces, with messages that name the field and the fix:
//
//   spec.globalBatch must be at least 1, got -5
//   spec.planning.allocator: "fastest" is not one of exact, greedy, uniform, ...
//   spec.planning.stepTimeTarget: "2 hours" is not a duration such as 250ms, 1.5s or 2m
//   unknown field "lrate" in spec.optimizer (known: gradClip, lr, name, schedule, ...)
//
// Unlike the API server, which prunes unknown fields silently, unknown fields are problems here
// (as in `qsync run`'s job files): a typo should not vanish.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/job_fields.h"

namespace qsync {

// Sets every absent field that has a default, top down: an object defaulted to {} then gets its
// children's defaults. `root` names the value's path in the table ("spec" or "status").
void apply_field_defaults(const std::vector<Field>& fields, const std::string& root, nlohmann::json& value);

// Every violation of the table's types, enums, bounds, lengths, patterns, required fields and
// known field names; empty when the value is valid. CEL rules are not evaluated here (the typed
// parser checks those cross-field rules itself).
std::vector<std::string> field_problems(const std::vector<Field>& fields, const std::string& root,
                                        const nlohmann::json& value);

}  // namespace qsync
