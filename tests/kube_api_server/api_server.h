// File: tests/kube_api_server/api_server.h
// The Kubernetes API test server: an in-memory kube-apiserver good enough for the operator's
// client and for the real kubectl (discovery, OpenAPI v3, CRUD with resourceVersions, patches,
// server-side apply, status subresources, CRDs with schema validation, label/field selectors,
// paging, watch with bookmarks and 410, finalizers, garbage collection, Tables for kubectl
// get), with fault injection and a "local kubelet" that runs Pods as processes (their output
// served at pods/NAME/log, so `kubectl logs` works). Use it
// in-process (start on port 0, talk to url()) or as the qsync-kube-test-server binary. With
// ServerOptions::controllers, Deployments and StatefulSets run their Pods and Pods that request
// GPUs are scheduled onto Nodes by their free nvidia.com/gpu (workload_controllers.h,
// pod_scheduler.h).
//
// HTTP admin endpoints (for tests driving the binary):
//   POST /_test/faults  {"fail": {"verb": "update", "path": "/leases/", "code": 409, "count": 2},
//                        "delayMs": 100, "closeWatches": true, "compactHistory": true,
//                        "bookmarkIntervalMs": 200, "dropConnections": true, "clear": true}
//                       ("fail" may be a list; dropConnections also drops the admin request's
//                       own connection, so its answer may not arrive)
//   DELETE /_test/faults   clears rules and delay
//   GET /_test/requests    the recent exchanges, one a line
//   GET /_test/requests?summary=1
//                          every resource request since start, counted by (verb, group,
//                          resource[/subresource]): {"requests": [{"verb": "get", "group": "",
//                          "resource": "pods", "count": 3, "failed": 1}, ...]}
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/http/http_server.h"
#include "tests/kube_api_server/faults.h"
#include "tests/kube_api_server/server_options.h"

namespace qsync::kube_test {

struct ApiState;
struct ResourcePath;
class LocalKubelet;

class ApiServer {
 public:
  explicit ApiServer(ServerOptions options = {});
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Listens on host:port (0: any free port). Throws std::runtime_error when it cannot bind.
  void start(const std::string& host = "127.0.0.1", int port = 0);
  void stop();  // ends watches, joins every connection, kills local Pods
  std::string url() const;  // "http://127.0.0.1:PORT"
  int port() const;

  // One request through the same routing as HTTP, without a socket. A watch is collected until
  // its stream ends (pass timeoutSeconds).
  qsync::http::HttpResponse call(const std::string& method, const std::string& target, const std::string& body = "",
                                 const std::map<std::string, std::string>& headers = {});

  // Direct access to stored objects. `api_version` is "v1" or "group/version"; `ns` is ignored
  // for cluster-scoped types. get/list answer null / empty when the type or object is absent.
  nlohmann::json get_object(const std::string& api_version, const std::string& plural, const std::string& ns,
                            const std::string& name);
  std::vector<nlohmann::json> list_objects(const std::string& api_version, const std::string& plural,
                                           const std::string& ns = "");
  // Creates or replaces the object its apiVersion/kind/metadata name (no resourceVersion check;
  // status written too). Throws std::runtime_error with the Status message when rejected.
  nlohmann::json put_object(const nlohmann::json& object);

  // Fault injection.
  void fail_next(FaultRule rule);
  void set_response_delay(std::chrono::milliseconds delay);
  void clear_faults();
  void close_watches();      // open watch streams end cleanly
  void drop_connections();   // every open connection is cut (mid-stream)
  void compact_history();    // watches from any earlier resourceVersion answer 410
  void set_bookmark_interval(std::chrono::milliseconds interval);
  std::string current_resource_version();

  // The last exchanges ("PATCH /apis/... [application/merge-patch+json] -> 422 {...}").
  std::vector<std::string> recent_requests() const;
  std::string recent_requests_text() const;
  // Every resource request since start by (verb, group, resource[/subresource]); see above.
  nlohmann::json request_summary() const;

  // Writes a kubeconfig that points kubectl at this server; returns `path`.
  std::string write_kubeconfig(const std::string& path) const;
  std::string kubelet_log_path(const std::string& ns, const std::string& name) const;  // "" without a kubelet

 private:
  qsync::http::HandlerResult handle(const qsync::http::HttpRequest& req);
  qsync::http::HandlerResult route(const qsync::http::HttpRequest& req);
  qsync::http::HandlerResult admin(const qsync::http::HttpRequest& req);
  qsync::http::HandlerResult pod_log(const ResourcePath& p);  // GET pods/NAME/log from the local kubelet
  void write_pod_status(const std::string& ns, const std::string& name, const std::string& node_name,
                        const nlohmann::json& status);

  std::unique_ptr<ApiState> state_;
  std::unique_ptr<LocalKubelet> kubelet_;
  std::unique_ptr<qsync::http::HttpServer> http_;
};

}  // namespace qsync::kube_test
