// File: tests/kube_api_server/rest_handlers.h
// The REST verbs of the test API server on /api/v1/... and /apis/GROUP/VERSION/...: get,
// list, watch, create, update, patch (merge, JSON patch, server-side apply; strategic merge
// only for built-in types, as a merge patch), delete and deletecollection, on the main
// resource and on /status.
#pragma once

#include <optional>
#include <string>

#include "operator/http/http_server.h"
#include "tests/kube_api_server/api_state.h"
#include "tests/kube_api_server/list_and_watch.h"

namespace qsync::kube_test {

// Splits a resource URL; nullopt when `path` is not one (/api/v1/namespaces/NS/pods/NAME,
// /apis/G/V/PLURAL/NAME/status, ...).
std::optional<ResourcePath> parse_resource_path(const std::string& path);

// The Kubernetes verb of a request: get, list, watch, create, update, patch, delete,
// deletecollection.
std::string request_verb(const qsync::http::HttpRequest& req, const ResourcePath& p);

// Serves one resource request. Errors become Status responses.
qsync::http::HandlerResult handle_resource_request(ApiState& s, const qsync::http::HttpRequest& req,
                                                   const ResourcePath& p);

}  // namespace qsync::kube_test
