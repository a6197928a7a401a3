// File: operator/controller/controller.h
// A controller, as controller-runtime's: informers' events become "namespace/name" keys in a
// de-duplicating, rate-limited work queue, and N worker threads call the reconcile function on
// them, never the same key twice at once. Reconciles are level-triggered: the function reads the
// whole current state for the key, whatever the event was.
//
// Result handling (controller-runtime's reconcileHandler):
//   returns ReconcileResult{}              -> forget the key's backoff        (result=success)
//   returns requeue_after = d (> 0)        -> forget, queue again after d     (result=requeue_after)
//   returns requeue = true                 -> queue again, rate limited       (result=requeue)
//   throws TerminalError                   -> forget, do not queue again      (result=error, terminal)
//   throws another std::exception          -> queue again, rate limited       (result=error)
//   throws anything else (a "panic")       -> recovered, counted, rate limited (result=error, panic)
//
//   Controller c({.name = "jobs", .max_concurrent_reconciles = 4}, reconcile);
//   c.watch_for(jobs_informer);                                   // the root type
//   c.watch_owned(pods_informer, "qsync.io/v1alpha1", "HybridTrainingJob");
//   c.start(); ... c.stop();
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/controller/informer.h"
#include "operator/controller/work_queue.h"

namespace qsync::controller {

class OperatorMetrics;

struct ReconcileResult {
  bool requeue = false;                                // queue again with the rate limiter's delay
  std::optional<std::chrono::milliseconds> requeue_after;  // queue again after this (wins over requeue)
};

// A reconcile error that retrying cannot fix (an invalid spec): logged and counted, not requeued.
class TerminalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Reconciler = std::function<ReconcileResult(const std::string& key)>;

// Filters events before they are mapped to keys; an unset function lets its events through.
struct Predicate {
  std::function<bool(const json& object)> create;
  std::function<bool(const json& old_object, const json& new_object)> update;
  std::function<bool(const json& object)> remove;
};
// Lets an update through only when metadata.generation changed (skips status-only writes and
// resyncs); creates and deletes always pass.
Predicate generation_changed_predicate();

struct ControllerOptions {
  std::string name;                       // metric label and queue name, e.g. "hybridtrainingjob"
  int max_concurrent_reconciles = 1;
  std::unique_ptr<RateLimiter> rate_limiter;  // null: default_controller_rate_limiter()
  OperatorMetrics* metrics = nullptr;         // may be null; must outlive the controller
};

class Controller {
 public:
  Controller(ControllerOptions options, Reconciler reconcile);
  ~Controller();  // stop()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  const std::string& name() const { return name_; }

  // Events of the root type queue the object's own key.
  void watch_for(Informer& informer, std::vector<Predicate> predicates = {});
  // Events of a child type queue the key of its controlling owner of the given group and kind
  // (ownerReferences with controller: true); children without one are ignored.
  void watch_owned(Informer& informer, const std::string& owner_api_version, const std::string& owner_kind,
                   std::vector<Predicate> predicates = {});
  // Any mapping from an object to keys (controller-runtime's EnqueueRequestsFromMapFunc).
  void watch_mapped(Informer& informer, std::function<std::vector<std::string>(const json&)> map_to_keys,
                    std::vector<Predicate> predicates = {});

  // Starts max_concurrent_reconciles worker threads. Calling it twice is an error.
  void start();
  // Shuts the queue down and waits up to `grace` for in-flight reconciles to finish; returns
  // false when some were still running (the destructor then waits for them).
  bool stop(std::chrono::milliseconds grace = std::chrono::seconds(30));
  bool started() const { return started_.load(); }

  WorkQueue& queue() { return *queue_; }
  int active_workers() const { return active_workers_.load(); }

 private:
  void run_worker();
  void reconcile_key(const std::string& key);
  void record_reconcile(const std::string& result, std::chrono::steady_clock::time_point start);

  std::string name_;
  int workers_;
  Reconciler reconcile_;
  OperatorMetrics* metrics_;
  std::unique_ptr<WorkQueue> queue_;
  std::vector<std::thread> threads_;
  std::atomic<bool> started_{false};
  std::atomic<int> active_workers_{0};
  std::atomic<int> running_threads_{0};
  std::mutex exit_mu_;
  std::condition_variable exit_cv_;
};

}  // namespace qsync::controller
