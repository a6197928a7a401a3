// File: tests/support/http_client.h
// A plain-socket HTTP/1.1 GET for tests: enough to scrape a /metrics endpoint or call Prometheus'
// HTTP API on loopback (identity or chunked bodies, no TLS, no redirects, no compression).
#pragma once

#include <chrono>
#include <string>

namespace qsync::test {

struct HttpResponse {
  int status = 0;  // e.g. 200
  std::string body;
};

// GET http://host:port/target (target starts with '/', already URL-encoded). Throws
// std::runtime_error naming the URL when connecting, sending or reading fails or times out.
HttpResponse http_get(const std::string& host, int port, const std::string& target,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Percent-encodes everything but RFC 3986 unreserved characters (for query parameters).
std::string url_encode(const std::string& s);

}  // namespace qsync::test
