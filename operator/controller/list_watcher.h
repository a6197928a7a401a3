// File: operator/controller/list_watcher.h
// Where an informer gets its objects: list() and watch() of one resource type (in one namespace
// or all, optionally filtered by selectors), mirroring KubeClient's verbs of the same names so
// that tests can script a fake source (410 mid-stream, disconnects, duplicated events).
// KubeListWatcher is the real one, on a shared KubeClient.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "operator/kube/kube_client.h"

namespace qsync::controller {

class ListWatcher {
 public:
  virtual ~ListWatcher() = default;
  // As KubeClient::list: every page (following `continue` unless options.single_page).
  virtual kube::ListResult list(const kube::ListOptions& options) = 0;
  // As KubeClient::watch: streams events until the server ends the stream, `on_event` returns
  // false or `stop` becomes true; returns the last resourceVersion seen. Throws KubeError (code
  // 410 when the resourceVersion is too old, code 0 on transport failures).
  virtual std::string watch(const kube::WatchOptions& options,
                            const std::function<bool(const kube::WatchEvent&)>& on_event,
                            const std::atomic<bool>* stop) = 0;
  // For logs: "pods in ns" / "pods".
  virtual std::string describe() const = 0;
};

class KubeListWatcher : public ListWatcher {
 public:
  // `ns` empty: all namespaces (or a cluster-scoped type). Selectors apply to list and watch.
  KubeListWatcher(kube::KubeClient& client, kube::ResourceType type, std::string ns = "",
                  std::string label_selector = "", std::string field_selector = "");
  kube::ListResult list(const kube::ListOptions& options) override;
  std::string watch(const kube::WatchOptions& options, const std::function<bool(const kube::WatchEvent&)>& on_event,
                    const std::atomic<bool>* stop) override;
  std::string describe() const override;

 private:
  kube::KubeClient& client_;
  kube::ResourceType type_;
  std::string ns_, label_selector_, field_selector_;
};

}  // namespace qsync::controller
