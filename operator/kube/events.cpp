// File: operator/kube/events.cpp
// The Event recorder: the first (object, reason, message) creates a core/v1 Event named
// "<object>.<hex>"; repeats merge-patch its count and lastTimestamp; a repeat whose Event has
// expired (404) creates it again. Failures are written to stderr, never thrown.
#include "operator/kube/events.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>

namespace qsync::kube {
namespace {

// Past this many distinct (object, reason, message) keys the table starts over, so a long-lived
// operator does not grow without bound (client-go keeps an LRU of the same size).
constexpr size_t kMaxAggregationKeys = 4096;

std::string field(const json& object, const char* section, const char* name) {
  if (!object.contains(section) || !object[section].is_object()) return "";
  const json& s = object[section];
  return s.contains(name) && s[name].is_string() ? s[name].get<std::string>() : "";
}

std::string unique_suffix() {
  static std::atomic<uint64_t> sequence{0};
  uint64_t nanos = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  char text[32];
  std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(nanos + sequence.fetch_add(1)));
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace

EventRecorder::EventRecorder(KubeClient& client, std::string component)
    : client_(client), component_(std::move(component)) {}

void EventRecorder::record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  std::string name = field(object, "metadata", "name");
  std::string object_ns = field(object, "metadata", "namespace");
  std::string uid = field(object, "metadata", "uid");
  // Events of cluster-scoped objects live in "default", as client-go puts them.
  std::string event_ns = object_ns.empty() ? "default" : object_ns;
  std::string key = (uid.empty() ? object_key(object_ns, name) : uid) + '\x1f' + reason + '\x1f' + message;
  std::string now = kube_time_now();

  std::lock_guard<std::mutex> lock(mu_);
  try {
    auto seen = seen_.find(key);
    if (seen != seen_.end()) {
      int count = seen->second.second + 1;
      try {
        client_.patch_merge(events_type(), event_ns, seen->second.first, json{{"count", count}, {"lastTimestamp", now}});
        seen->second.second = count;
        return;
      } catch (const KubeError& e) {
        if (e.code() != 404) throw;
        seen_.erase(seen);  // the Event expired: create it again below
      }
    }
    if (seen_.size() >= kMaxAggregationKeys) seen_.clear();
    std::string event_name = (name.empty() ? "object" : name) + "." + unique_suffix();
    json involved = {{"apiVersion", object.value("apiVersion", "")},
                     {"kind", object.value("kind", "")},
                     {"name", name},
                     {"uid", uid}};
    if (!object_ns.empty()) involved["namespace"] = object_ns;
    std::string resource_version = field(object, "metadata", "resourceVersion");
    if (!resource_version.empty()) involved["resourceVersion"] = resource_version;
    json event = {{"apiVersion", "v1"},
                  {"kind", "Event"},
                  {"metadata", {{"name", event_name}, {"namespace", event_ns}}},
                  {"involvedObject", involved},
                  {"reason", reason},
                  {"message", message},
                  {"type", type},
                  {"source", {{"component", component_}}},
                  {"firstTimestamp", now},
                  {"lastTimestamp", now},
                  {"count", 1},
                  {"reportingComponent", component_},
                  {"reportingInstance", host_name()}};
    client_.create(events_type(), event_ns, event);
    seen_[key] = {event_name, 1};
  } catch (const std::exception& e) {
    std::cerr << component_ << ": event " << reason << " for " << object_key(object_ns, name)
              << " not recorded: " << e.what() << "\n";
  }
}

}  // namespace qsync::kube
