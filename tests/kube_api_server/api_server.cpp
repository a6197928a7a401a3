// File: tests/kube_api_server/api_server.cpp
// The test API server's front: fault injection and delay, the request log, the admin and
// discovery/OpenAPI endpoints, then resource requests to rest_handlers; plus the in-process
// accessors and the kubeconfig writer.
#include "tests/kube_api_server/api_server.h"

#include <fstream>
#include <stdexcept>
#include <thread>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/api_state.h"
#include "tests/kube_api_server/local_kubelet.h"
#include "tests/kube_api_server/deletion.h"
#include "tests/kube_api_server/object_writes.h"
#include "tests/kube_api_server/openapi_documents.h"
#include "tests/kube_api_server/rest_handlers.h"
#include "tests/kube_api_server/workload_controllers.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using qsync::http::HandlerResult;
using qsync::http::HttpRequest;
using qsync::http::HttpResponse;

HandlerResult json_result(int status, const json& body) {
  HandlerResult r;
  r.response.status = status;
  r.response.headers["Content-Type"] = "application/json";
  r.response.body = body.dump();
  return r;
}

HandlerResult not_found_result() {
  return json_result(404, status_object(404, "NotFound", "the server could not find the requested resource"));
}

std::string reason_for(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "InternalError";
  }
}

std::pair<std::string, std::string> split_api_version(const std::string& api_version) {
  size_t slash = api_version.find('/');
  if (slash == std::string::npos) return {"", api_version};
  return {api_version.substr(0, slash), api_version.substr(slash + 1)};
}

// A ResponseStream that collects what a handler writes (in-process calls).
class CollectingStream : public qsync::http::ResponseStream {
 public:
  bool write(const std::string& chunk) override {
    body += chunk;
    return true;
  }
  bool client_gone() override { return false; }
  std::string body;
};

}  // namespace

ApiServer::ApiServer(ServerOptions options) : state_(std::make_unique<ApiState>(options)) {
  std::lock_guard lock(state_->mu);
  const ApiResource* namespaces = state_->registry.find("", "v1", "namespaces");
  for (const char* ns : {"default", "kube-system", "kube-public"}) {
    create_object(*state_, *namespaces, "v1", "", {{"metadata", {{"name", ns}}}});
  }
  if (options.local_kubelet) {
    const ApiResource* nodes = state_->registry.find("", "v1", "nodes");
    json node = {{"metadata", {{"name", "local"}, {"labels", {{"kubernetes.io/hostname", "local"}}}}}};
    node["status"]["addresses"] = json::array({{{"type", "InternalIP"}, {"address", "127.0.0.1"}}});
    create_object(*state_, *nodes, "v1", "", node);
    kubelet_ = std::make_unique<LocalKubelet>(
        LocalKubeletOptions{options.kubelet_log_dir, options.kubelet_bin_dir, options.kubelet_root_dir},
        [this](const std::string& ns, const std::string& name, const std::string& uid, const std::string& node,
               const json& status) {
          const json live = get_object("v1", "pods", ns, name);
          if (!live.is_null() && live["metadata"].value("uid", "") == uid) write_pod_status(ns, name, node, status);
        },
        [this](const std::string& ns, const std::string& name) { return get_object("v1", "configmaps", ns, name); },
        [this](const std::string& ns, const std::string& name, const std::string& uid) {
          std::lock_guard lock(state_->mu);
          finish_pod_termination(*state_, ns, name, uid);
          run_controllers(*state_);  // the freed GPUs may fit a pending Pod; a controller may replace it
        });
    state_->pod_added = [this](const json& pod) { kubelet_->pod_added(pod); };
    state_->pod_removed = [this](const json& pod) { kubelet_->pod_removed(pod); };
    state_->pod_terminating = [this](const json& pod, int64_t grace) { return kubelet_->pod_terminating(pod, grace); };
  }
}

ApiServer::~ApiServer() { stop(); }

void ApiServer::start(const std::string& host, int port) {
  if (http_) throw std::runtime_error("ApiServer::start: already started at " + http_->url());
  http_ = std::make_unique<qsync::http::HttpServer>(host, port, [this](const HttpRequest& req) { return handle(req); });
  std::lock_guard lock(state_->mu);
  state_->server_address = url().substr(7);
}

void ApiServer::stop() {
  if (http_) http_->stop();
  {
    std::lock_guard lock(state_->mu);
    state_->pod_added = nullptr;
    state_->pod_removed = nullptr;
    state_->pod_terminating = nullptr;
  }
  kubelet_.reset();
}

std::string ApiServer::url() const {
  if (!http_) throw std::runtime_error("ApiServer::url: call start() first");
  return http_->url();
}

int ApiServer::port() const { return http_ ? http_->port() : 0; }

HandlerResult ApiServer::handle(const HttpRequest& req) {
  bool admin_request = req.path.rfind("/_test/", 0) == 0;
  if (!admin_request) {
    auto delay = state_->faults.delay();
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
  }
  HandlerResult result = route(req);
  std::string line = req.method + " " + req.raw_target;
  if (!req.header("content-type").empty()) line += " [" + req.header("content-type") + "]";
  line += " -> " + std::to_string(result.response.status);
  if (result.stream) line += " (stream)";
  if (result.response.status >= 400) line += " " + result.response.body.substr(0, 600);
  if (!admin_request) {
    state_->request_log.record(line);
    if (auto p = parse_resource_path(req.path)) {
      std::string resource = p->subresource.empty() ? p->plural : p->plural + "/" + p->subresource;
      state_->request_summary.count(request_verb(req, *p), p->group, resource, result.response.status);
    }
  }
  return result;
}

HandlerResult ApiServer::route(const HttpRequest& req) {
  const std::string& path = req.path;
  if (path.rfind("/_test/", 0) == 0) return admin(req);
  if (auto p = parse_resource_path(path)) {
    std::string verb = request_verb(req, *p);
    if (auto fault = state_->faults.take(verb, req.method, path)) {
      std::string message = fault->message.empty() ? "injected fault: " + std::to_string(fault->code) + " for " + verb + " " + path
                                                   : fault->message;
      json status = status_object(fault->code, reason_for(fault->code), message);
      if (verb == "watch" && fault->code == 410) {
        HandlerResult r = json_result(200, json::object());
        r.response.body.clear();
        r.stream = [status](qsync::http::ResponseStream& out) {
          out.write(json{{"type", "ERROR"}, {"object", status}}.dump() + "\n");
        };
        return r;
      }
      return json_result(fault->code, status);
    }
    if (p->group.empty() && p->plural == "pods" && p->subresource == "log" && req.method == "GET") return pod_log(*p);
    return handle_resource_request(*state_, req, *p);
  }
  if (req.method != "GET" && req.method != "HEAD") return not_found_result();
  if (path == "/healthz" || path == "/readyz" || path == "/livez") {
    HandlerResult r;
    r.response.headers["Content-Type"] = "text/plain";
    r.response.body = "ok";
    return r;
  }
  if (path == "/version") {
    return json_result(200, {{"major", "1"},
                             {"minor", "32"},
                             {"gitVersion", "v1.32.0-qsync-test"},
                             {"gitCommit", "0000000000000000000000000000000000000000"},
                             {"gitTreeState", "clean"},
                             {"buildDate", "2026-01-01T00:00:00Z"},
                             {"goVersion", "go1.23"},
                             {"compiler", "gc"},
                             {"platform", "linux/amd64"}});
  }
  std::lock_guard lock(state_->mu);
  const ResourceRegistry& registry = state_->registry;
  json body;
  if (path == "/api") {
    body = registry.core_api_versions(state_->server_address);
  } else if (path == "/api/v1") {
    body = registry.api_resource_list("", "v1");
  } else if (path == "/apis") {
    body = registry.api_group_list();
  } else if (path.rfind("/apis/", 0) == 0) {
    std::string rest = path.substr(6);
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t slash = rest.find('/');
    body = slash == std::string::npos ? registry.api_group(rest)
                                      : registry.api_resource_list(rest.substr(0, slash), rest.substr(slash + 1));
  } else if (path == "/openapi/v3") {
    body = openapi_v3_root(registry);
  } else if (path.rfind("/openapi/v3/", 0) == 0) {
    body = openapi_v3_document(registry, path.substr(12));
  }
  return body.is_null() ? not_found_result() : json_result(200, body);
}

HandlerResult ApiServer::pod_log(const ResourcePath& p) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->store.get("/pods", p.ns, p.name) == nullptr) return json_result(404, not_found_error("pods", p.name).status());
  }
  std::ifstream in(kubelet_log_path(p.ns, p.name));
  if (!kubelet_ || !in) {
    return json_result(400, status_object(400, "BadRequest",
                                          "pod \"" + p.name + "\" has no local log: the server runs Pods only with --kubelet, "
                                          "and only those whose command is an absolute path"));
  }
  HandlerResult r;
  r.response.headers["Content-Type"] = "text/plain";
  r.response.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

HandlerResult ApiServer::admin(const HttpRequest& req) {
  if (req.path == "/_test/requests" && req.method == "GET") {
    std::string summary = req.param("summary");
    if (summary == "1" || summary == "true") return json_result(200, request_summary());
    HandlerResult r;
    r.response.headers["Content-Type"] = "text/plain";
    r.response.body = recent_requests_text();
    return r;
  }
  if (req.path != "/_test/faults") return not_found_result();
  if (req.method == "DELETE") {
    clear_faults();
    return json_result(200, status_object(200, "", "faults cleared"));
  }
  if (req.method != "POST") return json_result(405, status_object(405, "MethodNotAllowed", "use POST or DELETE"));
  json spec;
  try {
    spec = json::parse(req.body);
    if (!spec.is_object()) throw std::invalid_argument("not an object");
    if (spec.value("clear", false)) clear_faults();
    json fails = spec.contains("fail") ? spec["fail"] : json::array();
    if (fails.is_object()) fails = json::array({fails});
    for (const json& f : fails) {
      fail_next({f.value("verb", ""), f.value("path", ""), f.value("code", 500), f.value("count", 1), f.value("message", "")});
    }
    if (spec.contains("delayMs")) set_response_delay(std::chrono::milliseconds(spec["delayMs"].get<int64_t>()));
    if (spec.contains("bookmarkIntervalMs")) set_bookmark_interval(std::chrono::milliseconds(spec["bookmarkIntervalMs"].get<int64_t>()));
    if (spec.value("compactHistory", false)) compact_history();
    if (spec.value("closeWatches", false)) close_watches();
    if (spec.value("dropConnections", false)) drop_connections();
  } catch (const std::exception& e) {
    return json_result(400, status_object(400, "BadRequest",
                                          std::string("POST /_test/faults takes a JSON object such as "
                                                      "{\"fail\": {\"verb\": \"update\", \"path\": \"/leases/\", \"code\": 409, "
                                                      "\"count\": 1}}: ") +
                                              e.what()));
  }
  return json_result(200, status_object(200, "", "faults applied"));
}

HttpResponse ApiServer::call(const std::string& method, const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers) {
  HttpRequest req;
  req.method = method;
  req.raw_target = target;
  size_t q = target.find('?');
  req.path = qsync::http::url_decode(target.substr(0, q), false);
  if (q != std::string::npos) {
    std::string query = target.substr(q + 1);
    for (size_t start = 0; start <= query.size();) {
      size_t amp = query.find('&', start);
      if (amp == std::string::npos) amp = query.size();
      std::string part = query.substr(start, amp - start);
      size_t eq = part.find('=');
      if (!part.empty()) {
        req.query[qsync::http::url_decode(part.substr(0, eq), true)] =
            eq == std::string::npos ? "" : qsync::http::url_decode(part.substr(eq + 1), true);
      }
      start = amp + 1;
    }
  }
  for (const auto& [k, v] : headers) {
    std::string lower = k;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers[lower] = v;
  }
  if (!body.empty() && !req.headers.count("content-type")) req.headers["content-type"] = "application/json";
  req.body = body;
  req.peer = "in-process";
  HandlerResult result = handle(req);
  if (result.stream) {
    CollectingStream out;
    result.stream(out);
    result.response.body = out.body;
  }
  return result.response;
}

json ApiServer::get_object(const std::string& api_version, const std::string& plural, const std::string& ns,
                           const std::string& name) {
  auto [group, version] = split_api_version(api_version);
  std::lock_guard lock(state_->mu);
  const ApiResource* r = state_->registry.find(group, version, plural);
  if (r == nullptr) return nullptr;
  const json* object = state_->store.get(r->key(), r->namespaced ? ns : "", name);
  return object == nullptr ? json(nullptr) : served_object(*r, *object, version);
}

std::vector<json> ApiServer::list_objects(const std::string& api_version, const std::string& plural, const std::string& ns) {
  auto [group, version] = split_api_version(api_version);
  std::lock_guard lock(state_->mu);
  const ApiResource* r = state_->registry.find(group, version, plural);
  std::vector<json> out;
  if (r == nullptr) return out;
  for (const json& o : state_->store.list(r->key(), r->namespaced ? ns : "")) out.push_back(served_object(*r, o, version));
  return out;
}

json ApiServer::put_object(const json& object) {
  std::lock_guard lock(state_->mu);
  std::string api_version = object.value("apiVersion", ""), kind = object.value("kind", "");
  const ApiResource* found = state_->registry.find_kind(api_version, kind);
  if (found == nullptr) throw std::runtime_error("put_object: no resource type serves " + api_version + " " + kind);
  const ApiResource r = *found;
  std::string version = split_api_version(api_version).second;
  const json& meta = object.value("metadata", json::object());
  std::string ns = r.namespaced ? meta.value("namespace", "default") : "";
  std::string name = meta.value("name", "");
  try {
    json stored;
    if (state_->store.get(r.key(), ns, name) == nullptr) {
      stored = create_object(*state_, r, version, ns, object);
    } else {
      json replacement = object;
      replacement["metadata"].erase("resourceVersion");
      stored = update_object(*state_, r, version, ns, name, replacement, WriteTarget::main);
    }
    if (r.status_subresource && object.contains("status") && !stored.is_null() && state_->store.get(r.key(), ns, name)) {
      json with_status = stored;
      with_status["status"] = object["status"];
      stored = update_object(*state_, r, version, ns, name, with_status, WriteTarget::status);
    }
    run_controllers(*state_);
    return served_object(r, stored, version);
  } catch (const ApiError& e) {
    throw std::runtime_error("put_object " + kind + " " + name + ": " + e.what());
  }
}

void ApiServer::write_pod_status(const std::string& ns, const std::string& name, const std::string& node_name,
                                 const json& status) {
  std::lock_guard lock(state_->mu);
  const ApiResource r = *state_->registry.find("", "v1", "pods");
  const json* live = state_->store.get(r.key(), ns, name);
  if (live == nullptr) return;
  try {
    if (!node_name.empty() && (*live)["spec"].value("nodeName", "").empty()) {
      json bound = *live;
      bound["spec"]["nodeName"] = node_name;
      update_object(*state_, r, "v1", ns, name, bound, WriteTarget::main);
    }
    json next = *state_->store.get(r.key(), ns, name);
    next["status"] = status;
    update_object(*state_, r, "v1", ns, name, next, WriteTarget::status);
    run_controllers(*state_);  // readiness moves a workload's status; an exit frees GPUs
  } catch (const ApiError&) {
    // The Pod is being deleted; its status no longer matters.
  }
}

void ApiServer::fail_next(FaultRule rule) { state_->faults.fail_next(std::move(rule)); }
void ApiServer::set_response_delay(std::chrono::milliseconds delay) { state_->faults.set_delay(delay); }
void ApiServer::clear_faults() { state_->faults.clear(); }

void ApiServer::close_watches() {
  std::lock_guard lock(state_->mu);
  ++state_->watch_epoch;
  state_->changed.notify_all();
}

void ApiServer::drop_connections() {
  if (http_) http_->drop_connections();
}

void ApiServer::compact_history() {
  std::lock_guard lock(state_->mu);
  state_->store.compact();
  state_->changed.notify_all();
}

void ApiServer::set_bookmark_interval(std::chrono::milliseconds interval) { state_->bookmark_interval_ms = interval.count(); }

std::string ApiServer::current_resource_version() {
  std::lock_guard lock(state_->mu);
  return std::to_string(state_->store.current_resource_version());
}

std::vector<std::string> ApiServer::recent_requests() const { return state_->request_log.lines(); }
std::string ApiServer::recent_requests_text() const { return state_->request_log.text(); }
json ApiServer::request_summary() const { return state_->request_summary.to_json(); }

std::string ApiServer::write_kubeconfig(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("write_kubeconfig: cannot write " + path + " (does its directory exist?)");
  out << "apiVersion: v1\nkind: Config\n"
      << "clusters:\n- name: qsync-test\n  cluster:\n    server: " << url() << "\n"
      << "users:\n- name: qsync-test\n  user: {}\n"
      << "contexts:\n- name: qsync-test\n  context:\n    cluster: qsync-test\n    user: qsync-test\n    namespace: default\n"
      << "current-context: qsync-test\n";
  if (!out) throw std::runtime_error("write_kubeconfig: writing " + path + " failed");
  return path;
}

std::string ApiServer::kubelet_log_path(const std::string& ns, const std::string& name) const {
  return kubelet_ ? kubelet_->log_path(ns, name) : "";
}

}  // namespace qsync::kube_test
