// File: tests/kube_api_server/object_store.h
// The test API server's storage: objects by resource ("group/plural") and "namespace/name",
// one global resourceVersion counter, and a bounded log of change events that watches replay.
// A watch may start from any resourceVersion at or after history_floor(); older ones have been
// compacted away and answer 410 Gone. Not thread-safe: the server holds its lock around every
// call and waits on its own condition variable for new events.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

struct StoredEvent {
  int64_t resource_version = 0;
  std::string type;          // ADDED, MODIFIED, DELETED
  std::string resource_key;  // "group/plural"
  nlohmann::json object;
};

class ObjectStore {
 public:
  explicit ObjectStore(size_t history_limit);

  int64_t current_resource_version() const { return resource_version_; }
  // Every event after this resourceVersion is still in the log.
  int64_t history_floor() const { return history_floor_; }

  const nlohmann::json* get(const std::string& key, const std::string& ns, const std::string& name) const;
  // Objects of one resource, in one namespace ("" for all), sorted by namespace and name.
  std::vector<nlohmann::json> list(const std::string& key, const std::string& ns) const;
  // The same objects by pointer (valid while the caller holds the server's lock and nothing is
  // written): a paged list copies only its page.
  std::vector<const nlohmann::json*> list_refs(const std::string& key, const std::string& ns) const;
  // Every object of every resource: {resource key, object}.
  std::vector<std::pair<std::string, nlohmann::json>> all() const;
  // The same without copies; valid until the next put/remove of that object.
  std::vector<std::pair<std::string, const nlohmann::json*>> all_refs() const;

  // Stores `object` under a fresh resourceVersion (written into metadata.resourceVersion),
  // logs an ADDED or MODIFIED event and returns the stored object.
  nlohmann::json put(const std::string& key, nlohmann::json object);
  // Removes an object, logs DELETED (the object carries a fresh resourceVersion) and returns
  // it; null when absent.
  nlohmann::json remove(const std::string& key, const std::string& ns, const std::string& name);

  // Events of `key` ("" for all) with resourceVersion > `after`, oldest first.
  std::vector<StoredEvent> events_after(const std::string& key, int64_t after) const;
  // Drops the whole event log: watches from any resourceVersion before now answer 410.
  void compact();
  void set_history_limit(size_t limit);

 private:
  void log_event(StoredEvent event);
  static std::string object_id(const nlohmann::json& object);  // "namespace/name"

  size_t history_limit_;
  int64_t resource_version_ = 1;
  int64_t history_floor_ = 0;
  std::map<std::string, std::map<std::string, nlohmann::json>> objects_;
  std::deque<StoredEvent> history_;
};

}  // namespace qsync::kube_test
