// File: operator/kube/kube_client.h
// A Kubernetes API client on cpprestsdk (HTTP/1.1 + TLS), JSON through nlohmann::json. Objects
// are plain JSON (the operator's typed structs convert to and from it). Every verb throws
// KubeError (kube_error.h) on failure. Requests pass a client-side token bucket (QPS/burst, as
// client-go's rest.Config) and report to an optional observer (verb, HTTP code, seconds) for
// the operator's metrics. Thread-safe: one client is shared by the informers, the reconcilers
// and leader election.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kube/kube_config.h"
#include "operator/kube/kube_error.h"
#include "operator/kube/resource.h"

namespace qsync::kube {

using nlohmann::json;

struct ClientOptions {
  double qps = 20;       // client-go's defaults are 5/10; an operator raises them
  int burst = 30;
  double request_timeout_seconds = 30;  // non-watch requests
  std::string user_agent = "qsync-operator";
  // Called after every request: verb ("get", "list", "watch", "create", "update", "patch",
  // "delete"), HTTP code (0: transport failure), duration.
  std::function<void(const std::string& verb, int code, double seconds)> observer;
};

struct ListOptions {
  std::string label_selector;   // "app=x,tier in (a,b),!gone"
  std::string field_selector;   // "metadata.name=x"
  int64_t limit = 0;            // page size (0: all); list() follows `continue` unless single_page
  std::string continue_token;
  std::string resource_version; // "" (most recent), "0" (any)
  bool single_page = false;
};

struct ListResult {
  std::vector<json> items;
  std::string resource_version;  // the list's (ListMeta) resourceVersion: where a watch starts
  std::string continue_token;    // non-empty only with single_page and more to come
};

struct WatchOptions {
  std::string resource_version;  // start after this version ("" : synthetic ADDED for current state)
  std::string label_selector, field_selector;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;     // server closes the stream after this
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  json object;       // the object (ERROR: a Status)
};

enum class PropagationPolicy { DEFAULT, FOREGROUND, BACKGROUND, ORPHAN };

class KubeClient {
 public:
  KubeClient(KubeConfig config, ClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }

  json get(const ResourceType& type, const std::string& ns, const std::string& name);
  std::optional<json> get_if_exists(const ResourceType& type, const std::string& ns, const std::string& name);
  ListResult list(const ResourceType& type, const std::string& ns, const ListOptions& options = {});
  json create(const ResourceType& type, const std::string& ns, const json& object);
  // PUT with the object's metadata.resourceVersion: a stale one is a 409 Conflict KubeError.
  json update(const ResourceType& type, const json& object);
  json update_status(const ResourceType& type, const json& object);
  // application/merge-patch+json (RFC 7386).
  json patch_merge(const ResourceType& type, const std::string& ns, const std::string& name, const json& patch,
                   const std::string& subresource = "");
  // application/apply-patch+yaml (server-side apply; JSON is YAML) with fieldManager and force.
  json apply(const ResourceType& type, const json& object, const std::string& field_manager, bool force = true);
  // DELETE; returns the object as the server answered (it may still exist with a
  // deletionTimestamp while finalizers remain). A missing object is a 404 KubeError.
  json remove(const ResourceType& type, const std::string& ns, const std::string& name,
              PropagationPolicy propagation = PropagationPolicy::DEFAULT);
  // DELETE with DeleteOptions.gracePeriodSeconds (0: at once, as `kubectl delete --force
  // --grace-period=0` does for a pod whose node is gone).
  json remove_with_grace(const ResourceType& type, const std::string& ns, const std::string& name, int64_t grace_seconds);

  // Streams watch events to `on_event` until the server ends the stream (timeout), `on_event`
  // returns false, or `stop` becomes true (checked at least every second). Returns the last
  // resourceVersion seen (from objects and BOOKMARKs), to resume from. A 410 answer (or an ERROR
  // event with code 410) throws KubeError with code 410: the caller must list again. Any other
  // ERROR event throws KubeError with its Status; a stream cut mid-way (or a malformed event) is
  // a KubeError with reason "Transport": watch again from the returned version.
  std::string watch(const ResourceType& type, const std::string& ns, const WatchOptions& options,
                    const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>* stop = nullptr);

  // Any request (for tests and for what the typed verbs do not cover). Throws KubeError on a
  // non-2xx answer. `content_type` applies when body is given.
  json request(const std::string& method, const std::string& path_and_query, const std::optional<json>& body = {},
               const std::string& content_type = "application/json");

 private:
  // One request: token bucket, headers, observer (reported under `verb`), error mapping.
  json send(const std::string& verb, const std::string& method, const std::string& path_and_query,
            const std::optional<json>& body, const std::string& content_type);

  struct Impl;
  KubeConfig config_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// A Kubernetes timestamp ("2026-11-29T20:31:50Z") for now, and parsing one (seconds since epoch).
std::string kube_time_now();
std::string kube_time_format(double epoch_seconds);
double kube_time_parse(const std::string& timestamp);  // throws on a malformed one

}  // namespace qsync::kube
