// File: operator/kube/kube_http.cpp
// The cpprestsdk plumbing shared by the verbs and the watch: http_client settings (timeouts,
// TLS), common request headers, transport errors and query strings.
#include "operator/kube/kube_http.h"

#include <boost/asio/ssl.hpp>

#include "operator/kube/resource.h"

namespace qsync::kube {

web::http::client::http_client_config http_client_settings(const KubeConfig& config, double timeout_seconds) {
  web::http::client::http_client_config settings;
  settings.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0)));
  settings.set_validate_certificates(!config.insecure_skip_tls_verify);
  std::string ca = config.ca_file, cert = config.client_cert_file, key = config.client_key_file;
  if (!ca.empty() || !cert.empty()) {
    settings.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      if (!ca.empty()) ctx.load_verify_file(ca);
      if (!cert.empty()) ctx.use_certificate_chain_file(cert);
      if (!key.empty()) ctx.use_private_key_file(key, boost::asio::ssl::context::pem);
    });
  }
  return settings;
}

web::http::http_request make_http_request(const std::string& method, const std::string& path_and_query,
                                          const KubeConfig& config, const ClientOptions& options) {
  web::http::http_request request(method);
  request.set_request_uri(web::uri(path_and_query));
  request.headers().add("Accept", "application/json");
  request.headers().add("User-Agent", options.user_agent);
  std::string token = config.bearer_token();
  if (!token.empty()) request.headers().add("Authorization", "Bearer " + token);
  return request;
}

KubeError transport_error(const std::string& cause, const KubeConfig& config, const std::string& verb,
                          const std::string& path) {
  return KubeError(0, "Transport", cause + " (server " + config.server + ", from " + config.source + ")", verb, path);
}

QueryString& QueryString::add(const std::string& name, const std::string& value) {
  if (!value.empty()) params_.emplace_back(name, value);
  return *this;
}

std::string QueryString::str() const {
  std::string out;
  for (const auto& [name, value] : params_) {
    out += out.empty() ? "?" : "&";
    out += name + "=" + url_escape(value);
  }
  return out;
}

KubeClient::Impl::Impl(const KubeConfig& config, const ClientOptions& options)
    : client(config.server, http_client_settings(config, options.request_timeout_seconds)),
      bucket(options.qps, options.burst) {}

}  // namespace qsync::kube
