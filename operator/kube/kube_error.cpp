// File: operator/kube/kube_error.cpp
// Turns the API server's failed answers into KubeError: a `Status` body gives the API's reason
// and message; any other body (a proxy's HTML page, plain text) gives a reason derived from the
// HTTP code and the body's first bytes. Also builds `Status` objects for servers and fakes.
#include "operator/kube/kube_error.h"

#include <utility>

namespace qsync::kube {
namespace {

std::string what_text(int code, const std::string& reason, const std::string& message, const std::string& verb,
                      const std::string& path) {
  std::string text = "kubernetes";
  if (!verb.empty() || !path.empty()) text += " " + verb + " " + path;
  text += ": ";
  if (code != 0) text += std::to_string(code) + " ";
  text += reason;
  if (!message.empty()) text += ": " + message;
  return text;
}

// The reason the API would give for a code, for answers that carry no Status.
std::string reason_for_code(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 406: return "NotAcceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 504: return "Timeout";
    default: break;
  }
  if (code >= 500) return "InternalError";
  return "Unknown";
}

const KubeError* as_kube_error(const std::exception& e) { return dynamic_cast<const KubeError*>(&e); }

}  // namespace

KubeError::KubeError(int code, std::string reason, std::string message, std::string verb, std::string path)
    : std::runtime_error(what_text(code, reason, message, verb, path)),
      code_(code),
      reason_(std::move(reason)),
      message_(std::move(message)),
      verb_(std::move(verb)),
      path_(std::move(path)) {}

KubeError kube_error_from_response(int http_code, const std::string& body, const std::string& verb,
                                   const std::string& path) {
  nlohmann::json status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  // A "kind" of another type (a number, say) is not a Status: the body is reported as it came.
  if (status.is_object() && status.contains("kind") && status["kind"].is_string() &&
      status["kind"].get<std::string>() == "Status") {
    int code = http_code;
    if (code == 0 && status.contains("code") && status["code"].is_number_integer()) code = status["code"].get<int>();
    std::string reason;
    if (status.contains("reason") && status["reason"].is_string()) reason = status["reason"].get<std::string>();
    if (reason.empty()) reason = reason_for_code(code);
    std::string message;
    if (status.contains("message") && status["message"].is_string()) message = status["message"].get<std::string>();
    return KubeError(code, reason, message, verb, path);
  }
  constexpr size_t kBodyStart = 200;
  std::string message = body.substr(0, kBodyStart);
  if (body.size() > kBodyStart) message += "...";
  if (message.empty()) message = "(empty body)";
  return KubeError(http_code, reason_for_code(http_code), message, verb, path);
}

nlohmann::json kube_status_json(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},  {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

bool is_not_found(const std::exception& e) {
  const KubeError* k = as_kube_error(e);
  return k != nullptr && k->code() == 404;
}

bool is_already_exists(const std::exception& e) {
  const KubeError* k = as_kube_error(e);
  return k != nullptr && k->code() == 409 && k->reason() == "AlreadyExists";
}

bool is_conflict(const std::exception& e) {
  const KubeError* k = as_kube_error(e);
  return k != nullptr && k->code() == 409 && k->reason() != "AlreadyExists";
}

bool is_gone(const std::exception& e) {
  const KubeError* k = as_kube_error(e);
  return k != nullptr && k->code() == 410;
}

bool is_transport(const std::exception& e) {
  const KubeError* k = as_kube_error(e);
  return k != nullptr && k->code() == 0;
}

}  // namespace qsync::kube
