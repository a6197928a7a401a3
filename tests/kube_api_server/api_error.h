// File: tests/kube_api_server/api_error.h
// An error the test API server answers with: the HTTP code, the Kubernetes reason
// (NotFound, AlreadyExists, Conflict, Invalid, Gone, BadRequest, ...), a message worded as
// kube-apiserver words it, and optional Status details (causes of an Invalid error). status()
// is the `Status` object sent as the body.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

class ApiError : public std::runtime_error {
 public:
  ApiError(int code, std::string reason, const std::string& message, nlohmann::json details = nullptr);
  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  nlohmann::json status() const;

 private:
  int code_;
  std::string reason_;
  nlohmann::json details_;
};

// A `Status` object: {kind: Status, apiVersion: v1, status: Failure|Success, message, reason, code}.
nlohmann::json status_object(int code, const std::string& reason, const std::string& message,
                             const nlohmann::json& details = nullptr);

// `resource` is "pods" or "widgets.example.com" as the API server names it in messages.
ApiError not_found_error(const std::string& resource, const std::string& name);
ApiError already_exists_error(const std::string& resource, const std::string& name);
ApiError conflict_error(const std::string& resource, const std::string& name);
ApiError bad_request_error(const std::string& message);
// 422: `causes` are "field: message" strings (as schema_validate returns them).
ApiError invalid_error(const std::string& kind, const std::string& name, const std::vector<std::string>& causes);

}  // namespace qsync::kube_test
