// File: operator/controller/finalizers.h
// Finalizers on JSON objects, as controller-runtime's controllerutil: an operator adds its
// finalizer before creating anything external, and removes it once the external cleanup is done
// after the object is marked for deletion (metadata.deletionTimestamp set). Each edit returns
// whether the object changed, so the caller writes it back only when needed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace qsync::controller {

using nlohmann::json;

bool has_finalizer(const json& object, const std::string& finalizer);
bool add_finalizer(json& object, const std::string& finalizer);     // false: already there
bool remove_finalizer(json& object, const std::string& finalizer);  // false: was not there
// metadata.deletionTimestamp is set: the object waits for its finalizers to be removed.
bool is_being_deleted(const json& object);

}  // namespace qsync::controller
