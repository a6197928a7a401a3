// File: tests/operator/controller/fake_list_watcher.cpp
// The scripted in-memory ListWatcher.
#include "tests/operator/controller/fake_list_watcher.h"

#include <chrono>

#include "operator/kube/kube_error.h"

namespace qsync::controller_test {

json make_object(const std::string& ns, const std::string& name, const json& spec) {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", spec}};
}

namespace {
std::string key_of(const json& o) { return o["metadata"].value("namespace", "") + "/" + o["metadata"].value("name", ""); }
}  // namespace

json FakeListWatcher::upsert(json object) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = key_of(object);
  const bool exists = objects_.count(key) > 0;
  object["metadata"]["resourceVersion"] = std::to_string(++rv_);
  objects_[key] = object;
  history_.push_back({rv_, {exists ? "MODIFIED" : "ADDED", object}});
  cv_.notify_all();
  return object;
}

void FakeListWatcher::erase(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ns + "/" + name);
  if (it == objects_.end()) return;
  json object = it->second;
  objects_.erase(it);
  object["metadata"]["resourceVersion"] = std::to_string(++rv_);
  history_.push_back({rv_, {"DELETED", object}});
  cv_.notify_all();
}

void FakeListWatcher::fail_next_lists(int count) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_lists_ = count;
}

void FakeListWatcher::fail_next_watches(int count, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_watches_ = count;
  fail_watch_code_ = code;
}

void FakeListWatcher::end_watches() {
  std::lock_guard<std::mutex> lock(mu_);
  ++end_generation_;
  cv_.notify_all();
}

void FakeListWatcher::send_gone_to_watches() {
  std::lock_guard<std::mutex> lock(mu_);
  ++gone_generation_;
  cv_.notify_all();
}

void FakeListWatcher::compact() {
  std::lock_guard<std::mutex> lock(mu_);
  compacted_rv_ = rv_;
  history_.clear();
}

void FakeListWatcher::hold_events(bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = hold;
  cv_.notify_all();
}

void FakeListWatcher::duplicate_events(bool duplicate) {
  std::lock_guard<std::mutex> lock(mu_);
  duplicate_ = duplicate;
}

kube::ListResult FakeListWatcher::list(const kube::ListOptions&) {
  std::lock_guard<std::mutex> lock(mu_);
  ++list_calls_;
  if (fail_lists_ > 0) {
    --fail_lists_;
    throw kube::KubeError(0, "Transport", "connection refused (injected)", "list", "fake");
  }
  kube::ListResult result;
  for (const auto& [key, object] : objects_) result.items.push_back(object);
  result.resource_version = std::to_string(rv_);
  return result;
}

std::string FakeListWatcher::watch(const kube::WatchOptions& options,
                                   const std::function<bool(const kube::WatchEvent&)>& on_event,
                                   const std::atomic<bool>* stop) {
  std::unique_lock<std::mutex> lock(mu_);
  ++watch_calls_;
  watch_rvs_.push_back(options.resource_version);
  if (fail_watches_ > 0) {
    --fail_watches_;
    throw kube::KubeError(fail_watch_code_, fail_watch_code_ == 410 ? "Gone" : "Transport", "injected watch failure",
                          "watch", "fake");
  }
  int64_t last = options.resource_version.empty() ? 0 : std::stoll(options.resource_version);
  if (last < compacted_rv_) throw kube::KubeError(410, "Gone", "too old resource version (injected)", "watch", "fake");
  const int end_generation = end_generation_;
  const int gone_generation = gone_generation_;
  while (!(stop && stop->load())) {
    if (end_generation_ != end_generation) return std::to_string(last);
    if (gone_generation_ != gone_generation) {
      kube::WatchEvent error{"ERROR", kube::kube_status_json(410, "Expired", "too old resource version (injected)")};
      lock.unlock();
      on_event(error);
      return std::to_string(last);
    }
    std::vector<kube::WatchEvent> ready;
    if (!hold_) {
      for (const Entry& entry : history_) {
        if (entry.rv <= last) continue;
        ready.push_back(entry.event);
        if (duplicate_) ready.push_back(entry.event);
        last = entry.rv;
      }
    }
    if (ready.empty()) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      continue;
    }
    lock.unlock();
    for (const kube::WatchEvent& event : ready) {
      if (!on_event(event)) return std::to_string(last);
    }
    lock.lock();
  }
  return std::to_string(last);
}

int FakeListWatcher::list_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_calls_;
}

int FakeListWatcher::watch_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watch_calls_;
}

std::vector<std::string> FakeListWatcher::watch_resource_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watch_rvs_;
}

std::string FakeListWatcher::current_resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::to_string(rv_);
}

}  // namespace qsync::controller_test
