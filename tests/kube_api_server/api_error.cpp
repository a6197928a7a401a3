// File: tests/kube_api_server/api_error.cpp
// Status objects and the common API errors, worded like kube-apiserver's.
#include "tests/kube_api_server/api_error.h"

namespace qsync::kube_test {

using nlohmann::json;

ApiError::ApiError(int code, std::string reason, const std::string& message, json details)
    : std::runtime_error(message), code_(code), reason_(std::move(reason)), details_(std::move(details)) {}

json ApiError::status() const { return status_object(code_, reason_, what(), details_); }

json status_object(int code, const std::string& reason, const std::string& message, const json& details) {
  json out = {{"kind", "Status"},
              {"apiVersion", "v1"},
              {"metadata", json::object()},
              {"status", code < 400 ? "Success" : "Failure"},
              {"message", message},
              {"reason", reason},
              {"code", code}};
  if (!details.is_null()) out["details"] = details;
  return out;
}

ApiError not_found_error(const std::string& resource, const std::string& name) {
  return ApiError(404, "NotFound", resource + " \"" + name + "\" not found", {{"name", name}, {"kind", resource}});
}

ApiError already_exists_error(const std::string& resource, const std::string& name) {
  return ApiError(409, "AlreadyExists", resource + " \"" + name + "\" already exists",
                  {{"name", name}, {"kind", resource}});
}

ApiError conflict_error(const std::string& resource, const std::string& name) {
  return ApiError(409, "Conflict",
                  "Operation cannot be fulfilled on " + resource + " \"" + name +
                      "\": the object has been modified; please apply your changes to the latest version and try again",
                  {{"name", name}, {"kind", resource}});
}

ApiError bad_request_error(const std::string& message) { return ApiError(400, "BadRequest", message); }

ApiError invalid_error(const std::string& kind, const std::string& name, const std::vector<std::string>& causes) {
  std::string joined;
  json cause_list = json::array();
  for (size_t i = 0; i < causes.size(); ++i) {
    joined += (i > 0 ? ", " : "") + causes[i];
    size_t colon = causes[i].find(": ");
    cause_list.push_back({{"reason", "FieldValueInvalid"},
                          {"message", colon == std::string::npos ? causes[i] : causes[i].substr(colon + 2)},
                          {"field", colon == std::string::npos ? "" : causes[i].substr(0, colon)}});
  }
  std::string message = kind + " \"" + name + "\" is invalid: " + (causes.size() > 1 ? "[" + joined + "]" : joined);
  return ApiError(422, "Invalid", message, {{"name", name}, {"kind", kind}, {"causes", cause_list}});
}

}  // namespace qsync::kube_test
