// File: operator/controller/owner_refs.h
// Owner references on JSON objects, as controller-runtime's controllerutil: make an object the
// controller of a child (so the garbage collector deletes the child with it, and the child's
// events reach the owner's reconcile), and find a child's controlling owner.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::controller {

using nlohmann::json;

// Adds (or refreshes) an ownerReference to `owner` in child.metadata.ownerReferences with
// controller: true and blockOwnerDeletion: true. Throws std::invalid_argument when the owner
// lacks apiVersion, kind, metadata.name or metadata.uid, when a namespaced child would be owned
// across namespaces, and when another object already controls the child (naming it).
void set_controller_reference(json& child, const json& owner);

// The ownerReference with controller: true, if any.
std::optional<json> controller_reference_of(const json& child);

// The work-queue key of the child's controlling owner when that owner is of `owner_api_version`'s
// group (the version may differ) and `owner_kind`: "child-namespace/owner-name" for a namespaced
// owner, "owner-name" for a cluster-scoped one. std::nullopt when no such controller.
std::optional<std::string> owner_key_of(const json& child, const std::string& owner_api_version,
                                        const std::string& owner_kind, bool owner_namespaced = true);

// "apps/v1" -> "apps", "v1" -> "".
std::string group_of_api_version(const std::string& api_version);

}  // namespace qsync::controller
