// File: bench/operator_bench_phases.h
// qsync-bench-operator's measurements, each against an API test server reached only through a
// KubeClient: informer scale (time to sync N Pods and resident memory, with the server in this
// process or in its own), event latency (write -> key in a work queue) and reconcile throughput
// (a Controller's first pass over M objects). Each returns its figures as JSON for the report.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/controller/informer.h"
#include "operator/kube/kube_client.h"

namespace qsync::operator_bench {

// Creates `pods` Pods through `client` (whose server lives in this process), then starts a Pod
// informer listing in pages of `page_size` and times its sync. Figures: sync_seconds, VmRSS
// before the objects, after them and after the sync; informer_rss_mib (after sync minus before
// the informer started) and the same after malloc_trim. The informer keeps watching.
struct InProcessInformer {
  nlohmann::json figures;
  std::unique_ptr<controller::Informer> informer;
};
InProcessInformer informer_scale_in_process(kube::KubeClient& client, int pods, int64_t page_size);

// Starts `server_binary` (qsync-kube-test-server), creates `pods` Pods in it, then runs this
// executable again in its informer-only mode (run_informer_child). Figures: that process's
// sync_seconds, VmRSS at start, synced, peak (VmHWM) and after malloc_trim.
nlohmann::json informer_scale_separate(const std::string& server_binary, int pods, int64_t page_size);
// The informer-only mode: syncs a Pod informer from `url` and prints its figures as one JSON line.
int run_informer_child(const std::string& url, int pods, int64_t page_size);

// While `informer` watches the Pods, writes `rate` merge patches a second (a label) for `seconds`
// from a second client; each write's latency runs from just before the request until the
// informer's handler has queued the key in a WorkQueue at that write's resourceVersion.
// Figures: writes, achieved_rate, missed (never seen within 5 s), p50_ms, p99_ms, max_ms.
nlohmann::json event_latency(controller::Informer& informer, const std::string& url, int pods, int rate, int seconds);

// With `objects` ConfigMaps in the server: a synced informer, then a Controller with `workers`
// workers whose no-op reconcile reads the informer's cache; seconds from the controller's start
// until every key was reconciled once.
double reconcile_throughput(kube::KubeClient& client, int objects, int workers, int64_t page_size);

}  // namespace qsync::operator_bench
