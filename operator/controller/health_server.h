// File: operator/controller/health_server.h
// The operator's probes, as controller-runtime's healthz: /healthz (liveness: ok while the process
// serves, plus named health checks) and /readyz (readiness: named checks such as "caches synced"
// and "leader or standby"), served by qsync::http::HttpServer. Answers as kube-apiserver's:
// 200 "ok", or 500 listing "[-]name failed: reason"; "?verbose" lists every check; /healthz/NAME
// and /readyz/NAME run one check. Checks may be added while serving. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace qsync::http {
class HttpServer;
struct HttpRequest;
struct HandlerResult;
}  // namespace qsync::http

namespace qsync::controller {

// A check: std::nullopt when healthy, otherwise why it is not.
using HealthCheck = std::function<std::optional<std::string>()>;

class HealthServer {
 public:
  // Serves on host:port (port 0: any free port). Throws std::runtime_error naming the address
  // when it cannot bind (change --health-probe-bind-address).
  HealthServer(const std::string& host, int port);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  void add_health_check(const std::string& name, HealthCheck check);
  void add_ready_check(const std::string& name, HealthCheck check);

  int port() const;
  std::string url() const;  // "http://HOST:PORT"
  void stop();

 private:
  http::HandlerResult handle(const http::HttpRequest& request);

  std::mutex mu_;
  std::map<std::string, HealthCheck> health_checks_;
  std::map<std::string, HealthCheck> ready_checks_;
  std::unique_ptr<http::HttpServer> server_;
};

}  // namespace qsync::controller
