// File: tests/kube_api_server/object_store.cpp
// Objects, resourceVersions and the bounded event log behind the test API server.
#include "tests/kube_api_server/object_store.h"

#include <algorithm>

namespace qsync::kube_test {

using nlohmann::json;

ObjectStore::ObjectStore(size_t history_limit) : history_limit_(history_limit == 0 ? 1 : history_limit) {}

std::string ObjectStore::object_id(const json& object) {
  const json& meta = object.at("metadata");
  return meta.value("namespace", "") + "/" + meta.value("name", "");
}

const json* ObjectStore::get(const std::string& key, const std::string& ns, const std::string& name) const {
  auto by_key = objects_.find(key);
  if (by_key == objects_.end()) return nullptr;
  auto it = by_key->second.find(ns + "/" + name);
  return it == by_key->second.end() ? nullptr : &it->second;
}

std::vector<json> ObjectStore::list(const std::string& key, const std::string& ns) const {
  std::vector<json> out;
  auto by_key = objects_.find(key);
  if (by_key == objects_.end()) return out;
  for (const auto& [id, object] : by_key->second) {
    if (ns.empty() || id.compare(0, ns.size() + 1, ns + "/") == 0) out.push_back(object);
  }
  return out;
}

std::vector<const json*> ObjectStore::list_refs(const std::string& key, const std::string& ns) const {
  std::vector<const json*> out;
  auto by_key = objects_.find(key);
  if (by_key == objects_.end()) return out;
  for (const auto& [id, object] : by_key->second) {
    if (ns.empty() || id.compare(0, ns.size() + 1, ns + "/") == 0) out.push_back(&object);
  }
  return out;
}

std::vector<std::pair<std::string, json>> ObjectStore::all() const {
  std::vector<std::pair<std::string, json>> out;
  for (const auto& [key, objects] : objects_) {
    for (const auto& [id, object] : objects) out.emplace_back(key, object);
  }
  return out;
}

std::vector<std::pair<std::string, const json*>> ObjectStore::all_refs() const {
  std::vector<std::pair<std::string, const json*>> out;
  for (const auto& [key, objects] : objects_) {
    for (const auto& [id, object] : objects) out.emplace_back(key, &object);
  }
  return out;
}

json ObjectStore::put(const std::string& key, json object) {
  object["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  auto& slot = objects_[key][object_id(object)];
  std::string type = slot.is_null() ? "ADDED" : "MODIFIED";
  slot = object;
  log_event({resource_version_, type, key, object});
  return object;
}

json ObjectStore::remove(const std::string& key, const std::string& ns, const std::string& name) {
  auto by_key = objects_.find(key);
  if (by_key == objects_.end()) return nullptr;
  auto it = by_key->second.find(ns + "/" + name);
  if (it == by_key->second.end()) return nullptr;
  json object = std::move(it->second);
  by_key->second.erase(it);
  object["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  log_event({resource_version_, "DELETED", key, object});
  return object;
}

void ObjectStore::log_event(StoredEvent event) {
  history_.push_back(std::move(event));
  while (history_.size() > history_limit_) {
    history_floor_ = history_.front().resource_version;
    history_.pop_front();
  }
}

std::vector<StoredEvent> ObjectStore::events_after(const std::string& key, int64_t after) const {
  auto first = std::upper_bound(history_.begin(), history_.end(), after,
                                [](int64_t rv, const StoredEvent& e) { return rv < e.resource_version; });
  std::vector<StoredEvent> out;
  for (auto it = first; it != history_.end(); ++it) {
    if (key.empty() || it->resource_key == key) out.push_back(*it);
  }
  return out;
}

void ObjectStore::compact() {
  history_.clear();
  history_floor_ = resource_version_;
}

void ObjectStore::set_history_limit(size_t limit) {
  history_limit_ = limit == 0 ? 1 : limit;
  while (history_.size() > history_limit_) {
    history_floor_ = history_.front().resource_version;
    history_.pop_front();
  }
}

}  // namespace qsync::kube_test
