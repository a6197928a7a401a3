// File: operator/controller/health_server.cpp
// /healthz and /readyz over qsync::http::HttpServer, answered as kube-apiserver answers them.
#include "operator/controller/health_server.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "operator/http/http_server.h"

namespace qsync::controller {

namespace {

http::HandlerResult text_answer(int status, std::string body) {
  http::HandlerResult result;
  result.response.status = status;
  result.response.headers["Content-Type"] = "text/plain; charset=utf-8";
  result.response.headers["X-Content-Type-Options"] = "nosniff";
  result.response.body = std::move(body);
  return result;
}

// Runs `checks` (a copy, so none runs under the server's lock) and answers for `endpoint`.
http::HandlerResult run_checks(const std::string& endpoint, const std::map<std::string, HealthCheck>& checks,
                               bool verbose) {
  std::string listing;
  bool healthy = true;
  for (const auto& [name, check] : checks) {
    std::optional<std::string> problem;
    try {
      problem = check();
    } catch (const std::exception& e) {
      problem = std::string("check threw: ") + e.what();
    }
    if (problem) {
      healthy = false;
      listing += "[-]" + name + " failed: " + *problem + "\n";
    } else {
      listing += "[+]" + name + " ok\n";
    }
  }
  if (!healthy) return text_answer(500, listing + endpoint + " check failed\n");
  if (verbose) return text_answer(200, listing + endpoint + " check passed\n");
  return text_answer(200, "ok");
}

}  // namespace

HealthServer::HealthServer(const std::string& host, int port) {
  server_ = std::make_unique<http::HttpServer>(host, port, [this](const http::HttpRequest& r) { return handle(r); });
}

HealthServer::~HealthServer() { stop(); }

void HealthServer::add_health_check(const std::string& name, HealthCheck check) {
  std::lock_guard<std::mutex> lock(mu_);
  health_checks_[name] = std::move(check);
}

void HealthServer::add_ready_check(const std::string& name, HealthCheck check) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_checks_[name] = std::move(check);
}

int HealthServer::port() const { return server_->port(); }

std::string HealthServer::url() const { return server_->url(); }

void HealthServer::stop() {
  if (server_) server_->stop();
}

http::HandlerResult HealthServer::handle(const http::HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") {
    return text_answer(405, "only GET and HEAD are served on the probe endpoints\n");
  }
  for (const std::string endpoint : {"healthz", "readyz"}) {
    const std::string root = "/" + endpoint;
    if (request.path != root && request.path.rfind(root + "/", 0) != 0) continue;
    std::map<std::string, HealthCheck> checks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checks = endpoint == "healthz" ? health_checks_ : ready_checks_;
    }
    if (endpoint == "healthz") checks.emplace("ping", [] { return std::optional<std::string>(); });
    if (request.path.size() > root.size() + 1) {
      const std::string name = request.path.substr(root.size() + 1);
      auto it = checks.find(name);
      if (it == checks.end()) return text_answer(404, "no " + endpoint + " check named '" + name + "'\n");
      checks = {{name, it->second}};
    }
    return run_checks(endpoint, checks, request.query.count("verbose") > 0);
  }
  return text_answer(404, "not found: the probes are /healthz and /readyz\n");
}

}  // namespace qsync::controller
