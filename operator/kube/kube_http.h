// File: operator/kube/kube_http.h
// Internal to the client (not for callers): the cpprestsdk plumbing that kube_client.cpp (the
// verbs) and kube_watch.cpp (the watch stream) share: the http_client configuration for a
// KubeConfig (timeouts, TLS verification, CA, client certificate), the request headers every
// call carries, the client's private state, and the query-string builder.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cpprest/http_client.h>

#include "operator/kube/kube_client.h"
#include "operator/kube/token_bucket.h"

namespace qsync::kube {

// http_client settings for `config`: `timeout_seconds` is cpprestsdk's inactivity timeout (it is
// reset by every chunk read), TLS verification unless the config says insecure, and an SSL
// context loading the CA, client certificate and key files.
web::http::client::http_client_config http_client_settings(const KubeConfig& config, double timeout_seconds);

// A request with the headers every call carries: Accept, User-Agent, Authorization (the bearer
// token as of now, so a rotated token file is picked up).
web::http::http_request make_http_request(const std::string& method, const std::string& path_and_query,
                                          const KubeConfig& config, const ClientOptions& options);

// The KubeError for a request that got no HTTP answer (code 0, reason "Transport").
KubeError transport_error(const std::string& cause, const KubeConfig& config, const std::string& verb,
                          const std::string& path);

// One line of a watch stream: nullopt for a blank line, else the event. A line that is not a
// JSON event object throws KubeError (reason "Transport", the line quoted); an ERROR event throws
// the API's error (its Status code, 500 when it has none).
std::optional<WatchEvent> watch_event_from_line(const std::string& line, const KubeConfig& config,
                                                const std::string& path);

// "?a=1&b=x%3Dy": names are fixed, values are percent-encoded; empty values are left out.
class QueryString {
 public:
  QueryString& add(const std::string& name, const std::string& value);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> params_;
};

struct KubeClient::Impl {
  Impl(const KubeConfig& config, const ClientOptions& options);
  web::http::client::http_client client;  // non-watch requests (request_timeout_seconds)
  TokenBucket bucket;
};

}  // namespace qsync::kube
