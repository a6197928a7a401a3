// File: tests/operator/kube/scripted_api_server.h
// A scripted stand-in for the API server in the client's unit tests: an HttpServer on
// 127.0.0.1 that records every request and answers through the test's handler, plus helpers
// for JSON answers and a KubeConfig pointing at it.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/http/http_server.h"
#include "operator/kube/kube_config.h"

namespace qsync::kube_test_support {

class ScriptedApiServer {
 public:
  explicit ScriptedApiServer(http::Handler handler)
      : handler_(std::move(handler)), server_("127.0.0.1", 0, [this](const http::HttpRequest& request) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            requests_.push_back(request);
          }
          return handler_(request);
        }) {}

  std::vector<http::HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::string url() const { return server_.url(); }
  kube::KubeConfig config(const std::string& token = "") const {
    kube::KubeConfig config;
    config.server = server_.url();
    config.token = token;
    config.namespace_ = "default";
    config.source = "scripted test server";
    return config;
  }
  http::HttpServer& server() { return server_; }

 private:
  std::mutex mu_;
  std::vector<http::HttpRequest> requests_;
  http::Handler handler_;
  http::HttpServer server_;  // last: stops (and joins its threads) before the members above go
};

inline http::HandlerResult json_answer(int status, const nlohmann::json& body) {
  http::HandlerResult result;
  result.response.status = status;
  result.response.headers["Content-Type"] = "application/json";
  result.response.body = body.dump();
  return result;
}

}  // namespace qsync::kube_test_support
