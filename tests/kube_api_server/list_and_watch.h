// File: tests/kube_api_server/list_and_watch.h
// Reads of collections in the test API server: list (labelSelector, fieldSelector,
// limit/continue, ListMeta.resourceVersion, or a meta.k8s.io/v1 Table for kubectl get) and
// watch (chunked JSON lines {type, object}; no resourceVersion or "0" replays current objects
// as ADDED; a resourceVersion older than the retained history answers 410 Gone; BOOKMARK
// events when allowWatchBookmarks; timeoutSeconds; close_watches ends streams).
#pragma once

#include <string>

#include "operator/http/http_server.h"
#include "tests/kube_api_server/api_state.h"

namespace qsync::kube_test {

struct ResourcePath {
  std::string group, version;  // "" group for /api/v1
  std::string ns;              // "" for cluster-scoped types and all-namespace requests
  std::string plural, name, subresource;
};

// True when the request's Accept header asks for a meta.k8s.io Table.
bool wants_table(const qsync::http::HttpRequest& req);

// GET on a collection without watch. Called with s.mu held; throws ApiError.
qsync::http::HttpResponse list_objects(ApiState& s, const ApiResource& r, const ResourcePath& p,
                                       const qsync::http::HttpRequest& req);

// GET on a collection with watch=1|true. Validates the request now (400, 410) and returns a
// stream that runs without s.mu held (it takes the lock itself). Throws ApiError.
qsync::http::HandlerResult watch_objects(ApiState& s, const ApiResource& r, const ResourcePath& p,
                                         const qsync::http::HttpRequest& req);

// The JSON of a single object or a Table of it, as GET answers.
qsync::http::HttpResponse object_response(const ApiResource& r, const ResourcePath& p,
                                          const qsync::http::HttpRequest& req, const nlohmann::json& object,
                                          int status);

}  // namespace qsync::kube_test
