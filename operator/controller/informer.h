// File: operator/controller/informer.h
// A shared informer for one resource type: a thread-safe local cache ("namespace/name" -> the
// object as JSON) kept current by a reflector thread, and handlers told of every change.
//
// The reflector, as client-go's: list (paged) -> watch from the list's resourceVersion with
// bookmarks and a timeoutSeconds drawn from [min, max] -> when the stream ends, watch again from
// the last resourceVersion seen. On 410 Gone it lists again and delivers the difference between
// the cache and the new list as events: ADDED for new objects, MODIFIED for ones whose
// resourceVersion changed, DELETED for ones that vanished, nothing for unchanged ones; so a gap
// neither loses nor repeats an event. Events repeating the cached resourceVersion are dropped.
// Transport errors back off exponentially (capped) and retry. Every resync period the cache is
// replayed to on_update (old == new), as controller-runtime's 10 h resync.
//
// Handlers run on the reflector thread in event order, never two at once: they must be quick
// (a controller's handler only enqueues a key).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/controller/list_watcher.h"

namespace qsync::controller {

using nlohmann::json;

struct InformerOptions {
  std::string name;                       // for logs and readiness checks, e.g. "pods"
  std::chrono::milliseconds resync_period = std::chrono::hours(10);  // zero: never
  int64_t page_size = 500;                // list limit per page (0: one answer)
  int min_watch_timeout_seconds = 300;    // each watch asks the server to end it after a time
  int max_watch_timeout_seconds = 600;    // drawn uniformly from [min, max]
  std::chrono::milliseconds initial_backoff = std::chrono::milliseconds(800);  // after a failure
  std::chrono::milliseconds max_backoff = std::chrono::seconds(30);
};

struct EventHandler {
  std::function<void(const json& object)> on_add;
  std::function<void(const json& old_object, const json& new_object)> on_update;
  std::function<void(const json& object)> on_delete;  // the last state known
};

class Informer {
 public:
  Informer(std::shared_ptr<ListWatcher> source, InformerOptions options);
  ~Informer();  // stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  const std::string& name() const { return options_.name; }

  // Handlers added after the cache holds objects first receive every cached object as on_add.
  void add_handler(EventHandler handler);
  // Starts the reflector (and resync) threads; calling it twice is an error.
  void start();
  // Stops the threads (an open watch ends within about a second) and joins them.
  void stop();

  // True once the first list has been delivered to the handlers.
  bool has_synced() const;
  bool wait_for_sync(std::chrono::milliseconds timeout) const;

  std::optional<json> get(const std::string& key) const;  // "namespace/name"
  std::vector<json> list() const;
  size_t size() const;
  std::string last_resource_version() const;

  // Counters for tests and logs.
  int lists() const { return lists_.load(); }
  int watches() const { return watches_.load(); }

 private:
  enum class Change { ADDED, MODIFIED, DELETED };

  void run_reflector();
  void run_resync();
  std::string relist();  // returns the list's resourceVersion
  void watch_once(const std::string& resource_version);
  void apply_event(const kube::WatchEvent& event);
  void deliver(Change change, const json* old_object, const json& object);
  bool sleep_unless_stopped(std::chrono::milliseconds duration);

  std::shared_ptr<ListWatcher> source_;
  InformerOptions options_;

  // deliver_mu_ orders cache changes and handler calls; cache_mu_ guards the map for readers.
  std::mutex deliver_mu_;
  mutable std::mutex cache_mu_;
  mutable std::condition_variable synced_cv_;
  std::map<std::string, json> cache_;
  std::vector<EventHandler> handlers_;
  std::string resource_version_;
  bool synced_ = false;

  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread reflector_, resync_;
  std::atomic<int> lists_{0}, watches_{0};
};

// The cache key of an object: "namespace/name", or "name" without a namespace.
std::string key_of(const json& object);
// metadata.resourceVersion, "" when absent.
std::string resource_version_of(const json& object);

}  // namespace qsync::controller
