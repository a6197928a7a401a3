// File: tests/operator/api_server_fixture.cpp
// make_test_client and the ApiServerTest fixture (api_server_fixture.h).
#include "tests/operator/api_server_fixture.h"

#include <utility>

namespace qsync::operator_test {

std::unique_ptr<kube::KubeClient> make_test_client(const std::string& url, const kube::ClientOptions& options) {
  kube::KubeConfig config;
  config.server = url;
  config.source = "the in-process Kubernetes API test server";
  config.namespace_ = "default";
  return std::make_unique<kube::KubeClient>(config, options);
}

ApiServerTest::ApiServerTest(kube_test::ServerOptions server_options, const kube::ClientOptions& client_options)
    : server_(std::move(server_options)) {
  server_.start();
  client_ = make_test_client(server_.url(), client_options);
}

}  // namespace qsync::operator_test
