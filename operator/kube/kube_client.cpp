// File: operator/kube/kube_client.cpp
// The client's request/response verbs: get, list (following `continue`), create, update,
// update_status, merge patch, server-side apply, delete, and the raw request() they share. Each
// request waits for the token bucket, carries the bearer token as of now, reports to the
// observer, and turns a failed answer into a KubeError. The watch lives in kube_watch.cpp.
#include "operator/kube/kube_client.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "operator/kube/kube_http.h"

namespace qsync::kube {
namespace {

std::string verb_of_method(const std::string& method) {
  if (method == "GET") return "get";
  if (method == "POST") return "create";
  if (method == "PUT") return "update";
  if (method == "PATCH") return "patch";
  if (method == "DELETE") return "delete";
  return method;
}

void require_readable(const std::string& path, const std::string& what, const KubeConfig& config) {
  if (path.empty()) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error("kubernetes client: the " + what + " file " + path + " (from " + config.source +
                             ") cannot be read: " + std::strerror(errno));
  }
}

std::string metadata_field(const json& object, const char* field) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
  const json& metadata = object["metadata"];
  if (!metadata.contains(field) || !metadata[field].is_string()) return "";
  return metadata[field].get<std::string>();
}

std::string object_name_or_throw(const json& object, const std::string& verb) {
  std::string name = metadata_field(object, "name");
  if (name.empty()) throw std::invalid_argument("kubernetes " + verb + ": the object has no metadata.name");
  return name;
}

// The API server leaves apiVersion and kind out of list items; the client puts them back.
void complete_type_fields(json& object, const ResourceType& type) {
  if (!object.is_object()) return;
  if (!object.contains("apiVersion")) object["apiVersion"] = type.api_version();
  if (!object.contains("kind")) object["kind"] = type.kind;
}

}  // namespace

KubeClient::KubeClient(KubeConfig config, ClientOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (config_.server.rfind("http://", 0) != 0 && config_.server.rfind("https://", 0) != 0) {
    throw std::invalid_argument("kubernetes client: server '" + config_.server + "' (from " + config_.source +
                                ") must start with http:// or https://");
  }
  require_readable(config_.ca_file, "CA", config_);
  require_readable(config_.client_cert_file, "client certificate", config_);
  require_readable(config_.client_key_file, "client key", config_);
  impl_ = std::make_unique<Impl>(config_, options_);
}

KubeClient::~KubeClient() = default;

json KubeClient::request(const std::string& method, const std::string& path_and_query, const std::optional<json>& body,
                         const std::string& content_type) {
  return send(verb_of_method(method), method, path_and_query, body, content_type);
}

json KubeClient::send(const std::string& verb, const std::string& method, const std::string& path_and_query,
                      const std::optional<json>& body, const std::string& content_type) {
  impl_->bucket.wait();
  std::string path = path_and_query.substr(0, path_and_query.find('?'));
  web::http::http_request request = make_http_request(method, path_and_query, config_, options_);
  if (body.has_value()) request.set_body(body->dump(), content_type);

  auto start = std::chrono::steady_clock::now();
  auto seconds_since_start = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  int code = 0;
  std::string text;
  try {
    web::http::http_response response = impl_->client.request(request).get();
    code = response.status_code();
    text = response.extract_utf8string(/*ignore_content_type=*/true).get();
  } catch (const std::exception& e) {
    if (options_.observer) options_.observer(verb, 0, seconds_since_start());
    throw transport_error(e.what(), config_, verb, path);
  }
  if (options_.observer) options_.observer(verb, code, seconds_since_start());
  if (code < 200 || code >= 300) throw kube_error_from_response(code, text, verb, path);
  if (text.empty()) return json();
  json answer = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded()) {
    throw KubeError(code, "InvalidResponse", "the answer is not JSON: " + text.substr(0, 200), verb, path);
  }
  return answer;
}

json KubeClient::get(const ResourceType& type, const std::string& ns, const std::string& name) {
  json object = send("get", "GET", type.path(ns, name), std::nullopt, "");
  complete_type_fields(object, type);
  return object;
}

std::optional<json> KubeClient::get_if_exists(const ResourceType& type, const std::string& ns, const std::string& name) {
  try {
    return get(type, ns, name);
  } catch (const KubeError& e) {
    if (e.code() == 404) return std::nullopt;
    throw;
  }
}

ListResult KubeClient::list(const ResourceType& type, const std::string& ns, const ListOptions& options) {
  ListResult result;
  std::string continue_token = options.continue_token;
  while (true) {
    QueryString query;
    query.add("labelSelector", options.label_selector).add("fieldSelector", options.field_selector);
    if (options.limit > 0) query.add("limit", std::to_string(options.limit));
    // The API refuses resourceVersion together with continue: the token already pins the version.
    if (continue_token.empty()) query.add("resourceVersion", options.resource_version);
    query.add("continue", continue_token);
    json page = send("list", "GET", type.path(ns) + query.str(), std::nullopt, "");
    if (page.contains("items") && page["items"].is_array()) {
      for (json& item : page["items"]) {
        complete_type_fields(item, type);
        result.items.push_back(std::move(item));
      }
    }
    const json& metadata = page.contains("metadata") ? page["metadata"] : json::object();
    if (metadata.contains("resourceVersion") && metadata["resourceVersion"].is_string()) {
      result.resource_version = metadata["resourceVersion"].get<std::string>();
    }
    continue_token.clear();
    if (metadata.contains("continue") && metadata["continue"].is_string()) {
      continue_token = metadata["continue"].get<std::string>();
    }
    if (continue_token.empty()) break;
    if (options.single_page) {
      result.continue_token = continue_token;
      break;
    }
  }
  return result;
}

json KubeClient::create(const ResourceType& type, const std::string& ns, const json& object) {
  json body = object;
  complete_type_fields(body, type);
  std::string target_ns = ns.empty() ? metadata_field(object, "namespace") : ns;
  if (type.namespaced && target_ns.empty()) target_ns = config_.namespace_;
  return send("create", "POST", type.path(target_ns), body, "application/json");
}

json KubeClient::update(const ResourceType& type, const json& object) {
  std::string name = object_name_or_throw(object, "update");
  json body = object;
  complete_type_fields(body, type);
  return send("update", "PUT", type.path(metadata_field(object, "namespace"), name), body, "application/json");
}

json KubeClient::update_status(const ResourceType& type, const json& object) {
  std::string name = object_name_or_throw(object, "update_status");
  json body = object;
  complete_type_fields(body, type);
  return send("update", "PUT", type.path(metadata_field(object, "namespace"), name, "status"), body,
              "application/json");
}

json KubeClient::patch_merge(const ResourceType& type, const std::string& ns, const std::string& name, const json& patch,
                             const std::string& subresource) {
  return send("patch", "PATCH", type.path(ns, name, subresource), patch, "application/merge-patch+json");
}

json KubeClient::apply(const ResourceType& type, const json& object, const std::string& field_manager, bool force) {
  std::string name = object_name_or_throw(object, "apply");
  if (field_manager.empty()) throw std::invalid_argument("kubernetes apply: a field manager is required");
  json body = object;
  complete_type_fields(body, type);
  QueryString query;
  query.add("fieldManager", field_manager);
  if (force) query.add("force", "true");
  return send("patch", "PATCH", type.path(metadata_field(object, "namespace"), name) + query.str(), body,
              "application/apply-patch+yaml");
}

json KubeClient::remove(const ResourceType& type, const std::string& ns, const std::string& name,
                        PropagationPolicy propagation) {
  std::string policy;
  switch (propagation) {
    case PropagationPolicy::DEFAULT: break;
    case PropagationPolicy::FOREGROUND: policy = "Foreground"; break;
    case PropagationPolicy::BACKGROUND: policy = "Background"; break;
    case PropagationPolicy::ORPHAN: policy = "Orphan"; break;
  }
  if (policy.empty()) return send("delete", "DELETE", type.path(ns, name), std::nullopt, "");
  // The policy goes both as DeleteOptions (what kubectl sends) and as a query parameter.
  json options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", policy}};
  return send("delete", "DELETE", type.path(ns, name) + QueryString().add("propagationPolicy", policy).str(), options,
              "application/json");
}

json KubeClient::remove_with_grace(const ResourceType& type, const std::string& ns, const std::string& name,
                                   int64_t grace_seconds) {
  json options = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"gracePeriodSeconds", grace_seconds},
                  {"propagationPolicy", "Background"}};
  return send("delete", "DELETE",
              type.path(ns, name) + QueryString().add("gracePeriodSeconds", std::to_string(grace_seconds)).str(), options,
              "application/json");
}

}  // namespace qsync::kube
