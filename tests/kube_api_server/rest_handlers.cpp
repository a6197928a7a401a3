// File: tests/kube_api_server/rest_handlers.cpp
// Routes a resource request to its verb under the server's lock and turns errors into Status
// answers. Patches are computed here against the live object and written through
// update_object, so a patch gets the same checks as a PUT.
#include "tests/kube_api_server/rest_handlers.h"

#include <sstream>
#include <vector>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/json_patch.h"
#include "tests/kube_api_server/label_selector.h"
#include "tests/kube_api_server/deletion.h"
#include "tests/kube_api_server/object_writes.h"
#include "tests/kube_api_server/protobuf_body.h"
#include "tests/kube_api_server/workload_controllers.h"
#include "tests/kube_api_server/yaml_json.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using qsync::http::HandlerResult;
using qsync::http::HttpRequest;
using qsync::http::HttpResponse;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream in(path);
  std::string part;
  while (std::getline(in, part, '/')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

json parse_body(const HttpRequest& req) {
  if (req.body.empty()) throw bad_request_error("the request has no body; send a JSON object");
  if (req.header("content-type").find("protobuf") != std::string::npos) {
    try {
      return protobuf_body_to_json(req.body);
    } catch (const std::invalid_argument& e) {
      throw ApiError(415, "UnsupportedMediaType", e.what());
    }
  }
  try {
    return json::parse(req.body);
  } catch (const json::parse_error&) {
    // Manifests sent as YAML (application/yaml) are accepted too.
    try {
      return yaml_to_json(req.body);
    } catch (const std::invalid_argument& e) {
      throw bad_request_error(std::string("the request body is neither JSON nor YAML: ") + e.what());
    }
  }
}

WriteOptions write_options(const HttpRequest& req) {
  WriteOptions options;
  options.strict_fields = req.param("fieldValidation") == "Strict";
  return options;
}

std::string media_type(const HttpRequest& req) {
  std::string ct = req.header("content-type");
  return ct.substr(0, ct.find(';'));
}

HttpResponse patch_object(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  std::string type = media_type(req);
  const std::string store_ns = r.namespaced ? p.ns : "";
  const json* found = s.store.get(r.key(), store_ns, p.name);
  WriteTarget target = p.subresource == "status" ? WriteTarget::status : WriteTarget::main;
  json patched;
  bool created = false;
  if (type == "application/apply-patch+yaml") {
    std::string manager = req.param("fieldManager");
    if (manager.empty()) throw bad_request_error("PATCH /apply requests require fieldManager to be set");
    json applied;
    try {
      applied = yaml_to_json(req.body);
    } catch (const std::invalid_argument& e) {
      throw bad_request_error(e.what());
    }
    if (!applied.is_object()) throw bad_request_error("the applied configuration must be an object");
    json live = found == nullptr ? json(nullptr) : served_object(r, *found, p.version);
    try {
      patched = server_side_apply(live, applied, manager, req.param("force") == "true");
    } catch (const ApplyConflict& e) {
      throw ApiError(409, "Conflict", std::string("Apply failed with conflicts: ") + e.what());
    } catch (const std::invalid_argument& e) {
      throw bad_request_error(e.what());
    }
    created = found == nullptr;
    if (created && target == WriteTarget::status) throw not_found_error(resource_label(r), p.name);
    if (!created) patched["metadata"]["resourceVersion"] = (*found)["metadata"]["resourceVersion"];
  } else {
    if (found == nullptr) throw not_found_error(resource_label(r), p.name);
    json live = served_object(r, *found, p.version);
    json body = parse_body(req);
    if (type == "application/merge-patch+json" || (type == "application/strategic-merge-patch+json" && !r.custom)) {
      patched = merge_patch(live, body);
    } else if (type == "application/json-patch+json") {
      try {
        patched = json_patch_apply(live, body);
      } catch (const std::invalid_argument& e) {
        throw ApiError(422, "Invalid", std::string("the JSON patch could not be applied: ") + e.what());
      }
    } else {
      throw ApiError(415, "UnsupportedMediaType",
                     "the body of the request was in an unknown format - accepted media types include: "
                     "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml");
    }
  }
  json stored = update_object(s, r, p.version, store_ns, p.name, patched, target, created, write_options(req));
  return object_response(r, p, req, stored, created ? 201 : 200);
}

HttpResponse delete_one(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  std::string propagation = req.param("propagationPolicy");
  std::optional<int64_t> grace_period;
  try {
    if (!req.param("gracePeriodSeconds").empty()) grace_period = std::stoll(req.param("gracePeriodSeconds"));
  } catch (const std::exception&) {
    throw bad_request_error("gracePeriodSeconds: not an integer: \"" + req.param("gracePeriodSeconds") + "\"");
  }
  json options = json::object();
  if (!req.body.empty()) {
    try {
      options = json::parse(req.body);
    } catch (const json::parse_error&) {
      throw bad_request_error("the DeleteOptions body is not JSON");
    }
  }
  if (options.is_object()) {
    if (options.contains("propagationPolicy") && options["propagationPolicy"].is_string()) {
      propagation = options["propagationPolicy"];
    } else if (options.value("orphanDependents", false)) {
      propagation = "Orphan";
    }
    if (options.contains("gracePeriodSeconds") && options["gracePeriodSeconds"].is_number_integer())
      grace_period = options["gracePeriodSeconds"].get<int64_t>();
    if (options.contains("preconditions") && options["preconditions"].is_object()) {
      const json* live = s.store.get(r.key(), r.namespaced ? p.ns : "", p.name);
      if (live == nullptr) throw not_found_error(resource_label(r), p.name);
      const json& pre = options["preconditions"];
      if ((pre.contains("uid") && pre["uid"] != (*live)["metadata"]["uid"]) ||
          (pre.contains("resourceVersion") && pre["resourceVersion"] != (*live)["metadata"]["resourceVersion"])) {
        throw conflict_error(resource_label(r), p.name);
      }
    }
  }
  json result = delete_object(s, r, p.ns, p.name, propagation, grace_period);
  return object_response(r, p, req, result, 200);
}

HttpResponse delete_collection(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  LabelSelector labels;
  try {
    labels = LabelSelector::parse(req.param("labelSelector"));
  } catch (const std::invalid_argument& e) {
    throw bad_request_error(std::string("invalid selector: ") + e.what());
  }
  json items = json::array();
  for (const json& object : s.store.list(r.key(), p.ns)) {
    const json& meta = object["metadata"];
    if (!labels.matches(meta.contains("labels") ? meta["labels"] : json(nullptr))) continue;
    if (s.store.get(r.key(), meta.value("namespace", ""), meta.value("name", "")) == nullptr) continue;  // collected
    items.push_back(served_object(r, delete_object(s, r, meta.value("namespace", ""), meta.value("name", ""),
                                                   req.param("propagationPolicy")),
                                  p.version));
  }
  HttpResponse res;
  res.headers["Content-Type"] = "application/json";
  res.body = json{{"kind", r.list_kind},
                  {"apiVersion", r.api_version(p.version)},
                  {"metadata", {{"resourceVersion", std::to_string(s.store.current_resource_version())}}},
                  {"items", items}}
                 .dump();
  return res;
}

HandlerResult error_result(const ApiError& e) {
  HandlerResult r;
  r.response.status = e.code();
  r.response.headers["Content-Type"] = "application/json";
  r.response.body = e.status().dump();
  return r;
}

}  // namespace

std::optional<ResourcePath> parse_resource_path(const std::string& path) {
  auto parts = split_path(path);
  ResourcePath p;
  size_t at = 0;
  if (parts.size() >= 3 && parts[0] == "api" && parts[1] == "v1") {
    p.version = "v1";
    at = 2;
  } else if (parts.size() >= 4 && parts[0] == "apis") {
    p.group = parts[1];
    p.version = parts[2];
    at = 3;
  } else {
    return std::nullopt;
  }
  std::vector<std::string> rest(parts.begin() + static_cast<long>(at), parts.end());
  if (rest.size() >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize") {
    p.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty() || rest.size() > 3) return std::nullopt;
  p.plural = rest[0];
  if (rest.size() > 1) p.name = rest[1];
  if (rest.size() > 2) p.subresource = rest[2];
  return p;
}

std::string request_verb(const HttpRequest& req, const ResourcePath& p) {
  const std::string& m = req.method;
  if (m == "GET" || m == "HEAD") {
    if (!p.name.empty()) return "get";
    std::string watch = req.param("watch");
    return watch == "1" || watch == "true" ? "watch" : "list";
  }
  if (m == "POST") return "create";
  if (m == "PUT") return "update";
  if (m == "PATCH") return "patch";
  if (m == "DELETE") return p.name.empty() ? "deletecollection" : "delete";
  return "unknown";
}

HandlerResult handle_resource_request(ApiState& s, const HttpRequest& req, const ResourcePath& p) {
  try {
    std::unique_lock lock(s.mu);
    const ApiResource* found = s.registry.find(p.group, p.version, p.plural);
    if (found == nullptr || (!found->namespaced && !p.ns.empty()) ||
        (!p.subresource.empty() && !(p.subresource == "status" && found->status_subresource) &&
         !(p.subresource == "scale" && found->scale_subresource))) {
      throw ApiError(404, "NotFound", "the server could not find the requested resource");
    }
    const ApiResource r = *found;  // a copy: a CRD write may re-register the type
    std::string verb = request_verb(req, p);
    HandlerResult result;
    if (p.subresource == "scale") {
      result.response = handle_scale(s, r, p, req);
      if (verb != "get") run_controllers(s);
      return result;
    }
    if (verb == "get") {
      const json* object = s.store.get(r.key(), r.namespaced ? p.ns : "", p.name);
      if (object == nullptr) throw not_found_error(resource_label(r), p.name);
      result.response = object_response(r, p, req, *object, 200);
    } else if (verb == "list") {
      result.response = list_objects(s, r, p, req);
    } else if (verb == "watch") {
      result = watch_objects(s, r, p, req);
    } else if (verb == "create" && p.name.empty()) {
      result.response = object_response(r, p, req, create_object(s, r, p.version, p.ns, parse_body(req), write_options(req)), 201);
    } else if (verb == "update") {
      WriteTarget target = p.subresource == "status" ? WriteTarget::status : WriteTarget::main;
      result.response = object_response(r, p, req, update_object(s, r, p.version, p.ns, p.name, parse_body(req), target, false, write_options(req)), 200);
    } else if (verb == "patch" && !p.name.empty()) {
      result.response = patch_object(s, r, p, req);
    } else if (verb == "delete" && p.subresource.empty()) {
      result.response = delete_one(s, r, p, req);
    } else if (verb == "deletecollection") {
      result.response = delete_collection(s, r, p, req);
    } else {
      throw ApiError(405, "MethodNotAllowed", req.method + " is not supported on " + req.path);
    }
    if (verb != "get" && verb != "list" && verb != "watch") run_controllers(s);
    return result;
  } catch (const ApiError& e) {
    return error_result(e);
  }
}

}  // namespace qsync::kube_test
