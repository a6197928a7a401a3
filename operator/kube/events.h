// File: operator/kube/events.h
// core/v1 Events for an object, aggregated as kubectl shows them: the first occurrence of
// (object, reason, message) creates an Event; repeats patch its count and lastTimestamp
// instead of creating more. Errors while recording are logged, never thrown (an Event is best
// effort, as in client-go's recorder).
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "operator/kube/kube_client.h"

namespace qsync::kube {

class EventRecorder {
 public:
  EventRecorder(KubeClient& client, std::string component);  // component: "qsync-operator"
  // type: "Normal" or "Warning". `object` is the regarding object (its apiVersion, kind,
  // metadata.namespace/name/uid are used).
  void record(const json& object, const std::string& type, const std::string& reason, const std::string& message);

 private:
  KubeClient& client_;
  std::string component_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, int>> seen_;  // aggregation key -> {event name, count}
};

}  // namespace qsync::kube
