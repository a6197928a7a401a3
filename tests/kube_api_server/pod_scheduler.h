// File: tests/kube_api_server/pod_scheduler.h
// The test API server's scheduler for Pods that request GPUs (nvidia.com/gpu in a container's
// limits or requests), as kube-scheduler's NodeResourcesFit filter and LeastAllocated score do
// it, and nothing more: a Pod without spec.nodeName that requests GPUs is bound to the
// schedulable Node (not cordoned, Ready) that matches its nodeSelector and required node
// affinity (In, NotIn, Exists, DoesNotExist on node labels; kubernetes.io/hostname also
// matches the node's name when the node lacks that label), whose NoSchedule/NoExecute taints
// the Pod tolerates (kube-scheduler's TaintToleration filter) and has the most GPUs free
// (allocatable minus what the Pods bound to it request; finished Pods hold nothing,
// terminating ones still do), ties by name. A Pod that fits nowhere stays Pending with
// PodScheduled=False, reason Unschedulable and the scheduler's message ("0/3 nodes are
// available: 2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node
// affinity/selector, 1 node(s) had untolerated taint {dedicated: inference}."); it is retried after every write. Pods that request no GPUs are left to
// the local kubelet, as before. The local kubelet hears of a GPU Pod only once it is bound.
// Called with ApiState::mu held; on only with ServerOptions::controllers.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_state.h"

namespace qsync::kube_test {

// nvidia.com/gpu the Pod requests (the largest of limits and requests over its containers' sum).
int64_t pod_gpu_request(const nlohmann::json& pod);

// Whether the Pod waits for this scheduler: GPUs requested, no spec.nodeName, not terminating.
bool pod_needs_scheduling(const ApiState& s, const nlohmann::json& pod);

// Binds what fits; marks the rest Unschedulable. True when it wrote anything.
bool schedule_pending_pods(ApiState& s);

}  // namespace qsync::kube_test
