// File: tests/kube_api_server/workload_controllers.h
// The apps/v1 controllers of the test API server, minimal but faithful to what the operator
// relies on, plus the scale subresource:
//   Deployments: spec.replicas (default 1) Pods from spec.template, each named
//     <deployment>-<pod-template-hash>-<random>, labelled pod-template-hash, controlled by the
//     Deployment (no ReplicaSet objects in between). Too few: Pods are created; too many: the
//     surplus is deleted (gracefully, as the ReplicaSet controller ranks them: unbound first,
//     then Pending, then not Ready, then the newest). Failed Pods are deleted and replaced.
//     status: observedGeneration, replicas, readyReplicas, availableReplicas, updatedReplicas,
//     unavailableReplicas and the Available condition.
//   StatefulSets: Pods <name>-<ordinal> (hostname = its name, subdomain = spec.serviceName,
//     label statefulset.kubernetes.io/pod-name); OrderedReady (the default) creates ordinal n
//     only when 0..n-1 are Running and Ready and removes the highest ordinal first, one at a
//     time; Parallel does all at once. status: observedGeneration, replicas, readyReplicas,
//     currentReplicas, updatedReplicas, availableReplicas.
//   /scale of both (autoscaling/v1 Scale: spec.replicas, status.replicas and status.selector):
//     GET, PUT and PATCH, which write the parent's spec.replicas (kubectl scale, HPAs, the
//     operator).
// The controllers and the GPU scheduler (pod_scheduler.h) run after every write, with
// ApiState::mu held, when ServerOptions::controllers is on; the scale subresource is always on.
#pragma once

#include "operator/http/http_server.h"
#include "tests/kube_api_server/api_state.h"
#include "tests/kube_api_server/list_and_watch.h"

namespace qsync::kube_test {

// Runs the Deployment and StatefulSet controllers and the scheduler until nothing changes
// (at most a few rounds). A no-op without ServerOptions::controllers.
void run_controllers(ApiState& s);

// GET, PUT or PATCH on deployments/NAME/scale or statefulsets/NAME/scale. Throws ApiError.
qsync::http::HttpResponse handle_scale(ApiState& s, const ApiResource& r, const ResourcePath& p,
                                       const qsync::http::HttpRequest& req);

// The workload's spec.selector as label selector text ("app=x,tier in (a,b)").
std::string selector_text(const nlohmann::json& selector);

}  // namespace qsync::kube_test
