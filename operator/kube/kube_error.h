// File: operator/kube/kube_error.h
// Typed errors of the Kubernetes client. The API server answers a failed request with a
// `Status` object ({kind: Status, code, reason, message}); the client turns it into a KubeError
// carrying the HTTP code, the API's reason (NotFound, AlreadyExists, Conflict, Gone, Invalid,
// Forbidden, Unauthorized, TooManyRequests, ...) and its message. Transport failures (connect
// refused, TLS, timeouts) are KubeError with code 0 and reason "Transport".
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::kube {

class KubeError : public std::runtime_error {
 public:
  KubeError(int code, std::string reason, std::string message, std::string verb = "", std::string path = "");
  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  const std::string& api_message() const { return message_; }  // the Status message, unprefixed
  const std::string& verb() const { return verb_; }
  const std::string& path() const { return path_; }

 private:
  int code_;
  std::string reason_, message_, verb_, path_;
};

// Builds the error for an HTTP answer: a `Status` body gives reason and message; any other body
// gives a reason from the code (404 NotFound, 409 Conflict, 410 Gone, 422 Invalid, 429
// TooManyRequests, 401 Unauthorized, 403 Forbidden, 5xx InternalError) and the body's start.
KubeError kube_error_from_response(int http_code, const std::string& body, const std::string& verb,
                                   const std::string& path);
// The `Status` object a server sends for an error (used by the test server and by fakes).
nlohmann::json kube_status_json(int code, const std::string& reason, const std::string& message);

bool is_not_found(const std::exception& e);       // 404
bool is_already_exists(const std::exception& e);  // 409 AlreadyExists
bool is_conflict(const std::exception& e);        // 409 Conflict (stale resourceVersion)
bool is_gone(const std::exception& e);            // 410 (resourceVersion too old)
bool is_transport(const std::exception& e);       // no HTTP answer

}  // namespace qsync::kube
