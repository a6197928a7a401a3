// File: operator/controller/list_watcher.cpp
// The KubeClient-backed ListWatcher: binds type, namespace and selectors to list and watch.
#include "operator/controller/list_watcher.h"

namespace qsync::controller {

KubeListWatcher::KubeListWatcher(kube::KubeClient& client, kube::ResourceType type, std::string ns,
                                 std::string label_selector, std::string field_selector)
    : client_(client),
      type_(std::move(type)),
      ns_(std::move(ns)),
      label_selector_(std::move(label_selector)),
      field_selector_(std::move(field_selector)) {}

kube::ListResult KubeListWatcher::list(const kube::ListOptions& options) {
  kube::ListOptions bound = options;
  bound.label_selector = label_selector_;
  bound.field_selector = field_selector_;
  return client_.list(type_, ns_, bound);
}

std::string KubeListWatcher::watch(const kube::WatchOptions& options,
                                   const std::function<bool(const kube::WatchEvent&)>& on_event,
                                   const std::atomic<bool>* stop) {
  kube::WatchOptions bound = options;
  bound.label_selector = label_selector_;
  bound.field_selector = field_selector_;
  return client_.watch(type_, ns_, bound, on_event, stop);
}

std::string KubeListWatcher::describe() const {
  return ns_.empty() ? type_.plural : type_.plural + " in " + ns_;
}

}  // namespace qsync::controller
