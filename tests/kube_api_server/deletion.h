// File: tests/kube_api_server/deletion.h
// Deletion in the test API server: DELETE honours finalizers (the object gets
// deletionTimestamp and stays until metadata.finalizers is empty) and propagationPolicy
// (Background, the default: dependents are collected after the owner goes; Foreground: the
// owner carries the foregroundDeletion finalizer until its dependents are gone; Orphan: the
// dependents lose their ownerReference). Called with ApiState::mu held; throws ApiError.
//
// Graceful Pod deletion, as on a real cluster, for Pods the local kubelet runs: DELETE sets
// metadata.deletionTimestamp (now + the grace period) and deletionGracePeriodSeconds (the
// DeleteOptions' gracePeriodSeconds, else spec.terminationGracePeriodSeconds, default 30), a
// MODIFIED watch event; the Pod stays Terminating (a create of its name answers 409
// AlreadyExists, updates do not remove it) while the kubelet SIGTERMs its process and SIGKILLs
// it at the end of the grace period; once the process has exited the kubelet calls
// finish_pod_termination, which removes the object (the DELETED event), or, when finalizers
// still hold it, sets deletionGracePeriodSeconds to 0 so that removing the last finalizer
// removes it. A second DELETE with a shorter grace period shortens it. Pods the kubelet does not
// run (no kubelet, not its kind of command, or their process already exited) and a grace period
// of 0 (gracePeriodSeconds=0, as `kubectl delete --grace-period=0 --force` sends) are removed at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_state.h"

namespace qsync::kube_test {

// Returns the deleted object, or the object now carrying deletionTimestamp when finalizers or
// a graceful Pod termination hold it. `grace_period_seconds`: DeleteOptions.gracePeriodSeconds
// (Pods only; unset: the Pod's spec.terminationGracePeriodSeconds).
nlohmann::json delete_object(ApiState& s, const ApiResource& r, const std::string& ns, const std::string& name,
                             const std::string& propagation,
                             std::optional<int64_t> grace_period_seconds = std::nullopt);

// The kubelet's call once a terminating Pod's process has exited: removes the Pod ns/name if
// it still has uid `uid` and is being deleted (see above).
void finish_pod_termination(ApiState& s, const std::string& ns, const std::string& name, const std::string& uid);

// Deletes objects whose owners are all gone (or being deleted in the foreground) and finishes
// foreground deletions whose dependents are gone. Runs after every deletion; re-entry is a no-op.
void collect_garbage(ApiState& s);

}  // namespace qsync::kube_test
