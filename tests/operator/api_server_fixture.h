// File: tests/operator/api_server_fixture.h
// The in-process Kubernetes API test server (tests/kube_api_server) with a client for it, as
// the operator's tests use them: make_test_client() for a server started elsewhere, and the
// GoogleTest fixture ApiServerTest, which starts a server for each test and connects client_.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "operator/kube/kube_client.h"
#include "tests/kube_api_server/api_server.h"

namespace qsync::operator_test {

// A client for the test server at `url` ("http://127.0.0.1:PORT"), namespace "default".
std::unique_ptr<kube::KubeClient> make_test_client(const std::string& url, const kube::ClientOptions& options = {});

// A test server started for each test (server_) and a client connected to it (client_). Tests
// write through either: server_ directly (no socket, no request counted) or client_.
class ApiServerTest : public ::testing::Test {
 protected:
  explicit ApiServerTest(kube_test::ServerOptions server_options = {}, const kube::ClientOptions& client_options = {});

  kube_test::ApiServer server_;
  std::unique_ptr<kube::KubeClient> client_;
};

}  // namespace qsync::operator_test
