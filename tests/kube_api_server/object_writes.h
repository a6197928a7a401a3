// File: tests/kube_api_server/object_writes.h
// The write path of the test API server, with the semantics of kube-apiserver: server-set
// metadata (uid, resourceVersion, generation that moves only on non-metadata, non-status
// changes, creationTimestamp, deletionTimestamp), 409 on existing names and stale
// resourceVersions, status subresource isolation, CRD schema pruning / defaulting /
// validation (422), CRD registration, and the final removal of objects (deletion.h holds DELETE
// and the garbage collector). Every function is called with ApiState::mu held and throws ApiError.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_state.h"

namespace qsync::kube_test {

enum class WriteTarget { main, status };

// fieldValidation=Strict: a custom object's fields that its schema does not declare are an
// error (400, as kube-apiserver's "strict decoding error") instead of being pruned silently.
struct WriteOptions {
  bool strict_fields = false;
};

// "pods" or "widgets.example.com": how the API server names a resource in messages.
std::string resource_label(const ApiResource& r);
// The object as served at `version` (apiVersion rewritten; versions share one schema here).
nlohmann::json served_object(const ApiResource& r, nlohmann::json object, const std::string& version);

// POST: `ns` is the request's namespace ("" for cluster-scoped types).
nlohmann::json create_object(ApiState& s, const ApiResource& r, const std::string& version, const std::string& ns,
                             nlohmann::json object, const WriteOptions& options = {});
// PUT (and the last step of PATCH). A non-empty metadata.resourceVersion must match the live
// one. `allow_create` makes a missing object a create (server-side apply).
nlohmann::json update_object(ApiState& s, const ApiResource& r, const std::string& version, const std::string& ns,
                             const std::string& name, nlohmann::json object, WriteTarget target,
                             bool allow_create = false, const WriteOptions& options = {});
// Removes an object for good, with its type's side effects: a local Pod's process is stopped, a
// CRD's type and objects go, a Namespace's objects go. Null when absent.
nlohmann::json remove_object(ApiState& s, const ApiResource& r, const std::string& ns, const std::string& name);

std::vector<std::string> object_finalizers(const nlohmann::json& object);  // metadata.finalizers
std::string rfc3339_now();  // "2026-01-02T03:04:05Z"

}  // namespace qsync::kube_test
