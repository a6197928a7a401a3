// File: tests/kube_api_server/json_patch.h
// The three patch types the Kubernetes API server accepts for custom resources:
//   merge_patch        application/merge-patch+json (RFC 7386), what client-side `kubectl apply`
//                      and `kubectl patch --type=merge` send;
//   json_patch_apply   application/json-patch+json (RFC 6902);
//   server_side_apply  application/apply-patch+yaml (`kubectl apply --server-side`), with field
//                      ownership recorded in metadata.managedFields (FieldsV1).
// Each returns the patched object and leaves its inputs untouched.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

using json = nlohmann::json;

// RFC 7386: null deletes a member, objects merge recursively, anything else replaces.
json merge_patch(const json& target, const json& patch);

// RFC 6902: `operations` is an array of {op: add|remove|replace|move|copy|test, path, from?,
// value?}; paths are JSON pointers (RFC 6901: ~0 is '~', ~1 is '/', "-" appends to an array).
// All or nothing: throws std::invalid_argument naming the operation's index and the reason.
json json_patch_apply(const json& target, const json& operations);

// Thrown when an apply would change a field that another field manager owns; the message
// names each field and its manager, as the API server's 409 Conflict does.
class ApplyConflict : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Server-side apply of the configuration `applied` (an object) by `field_manager` to `live`
// (null when the object does not exist yet):
//   - maps merge recursively; lists replace atomically, except lists of objects that all carry
//     a "name" (containers, env, ports, volumes; "type" for a list called "conditions"), which
//     merge item by item on that key;
//   - the fields `applied` sets become field_manager's (its "Apply" entry in
//     metadata.managedFields, FieldsV1); a field it owned before and no longer sets is removed
//     unless another manager owns it too; live fields the apply does not touch stay;
//   - setting a field another manager owns to a different value throws ApplyConflict, unless
//     `force`, which moves the field to field_manager;
//   - null values in `applied` are ignored; apiVersion, kind, metadata.name and
//     metadata.namespace come from `applied`; other server-set metadata (uid, resourceVersion,
//     generation, creationTimestamp, managedFields) is never taken from it and is not owned;
//   - an apply that changes nothing returns `live` as it was (its entry keeps its time).
// Throws std::invalid_argument when `applied` is not an object or field_manager is empty.
// The caller checks preconditions (resourceVersion) and strips status for /status isolation.
json server_side_apply(const json& live, const json& applied, const std::string& field_manager, bool force);

}  // namespace qsync::kube_test
