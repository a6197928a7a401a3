// File: operator/http/http_server.h
// A small threaded HTTP/1.1 server on POSIX sockets: one thread per connection, keep-alive,
// Content-Length and chunked request bodies, and streamed (chunked) responses for long-lived
// answers such as Kubernetes watches. Serves the operator's /healthz, /readyz and the
// Kubernetes API test server. Plain HTTP on a loopback or pod address (no TLS: in a cluster the
// probes and metrics are scraped over the pod network).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qsync::http {

struct HttpRequest {
  std::string method;                            // "GET", "POST", ...
  std::string path;                              // decoded path, no query: "/api/v1/pods"
  std::string raw_target;                        // as sent: "/api/v1/pods?watch=1"
  std::map<std::string, std::string> query;      // decoded query parameters (last one wins)
  std::map<std::string, std::string> headers;    // names lower-cased
  std::string body;
  std::string peer;                              // "127.0.0.1:54321"

  std::string header(const std::string& lower_name, const std::string& fallback = "") const;
  std::string param(const std::string& name, const std::string& fallback = "") const;
};

struct HttpResponse {
  int status = 200;
  std::map<std::string, std::string> headers;    // Content-Type etc.; Content-Length is set for you
  std::string body;
};

// A streamed response: the handler writes chunks until it returns. write() returns false once
// the client has gone (or the server is stopping): the handler should then return.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual bool write(const std::string& chunk) = 0;
  virtual bool client_gone() = 0;  // non-blocking check
};

// A handler answers either with a whole response or by streaming: set `stream` in the result
// and the server sends status and headers with chunked encoding, then calls it.
struct HandlerResult {
  HttpResponse response;
  std::function<void(ResponseStream&)> stream;  // empty: send `response` whole
};
using Handler = std::function<HandlerResult(const HttpRequest&)>;

class HttpServer {
 public:
  // Binds host:port (port 0: any free port) and starts accepting in a background thread.
  // Throws std::runtime_error naming the address when it cannot bind.
  HttpServer(const std::string& host, int port, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT"
  // Stops accepting, ends streams (their write() returns false) and joins every thread.
  void stop();
  // Closes every open connection now (fault injection: watches drop mid-stream).
  void drop_connections();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Percent-decoding of a URL component ("%2F" -> "/", "+" -> " " in queries).
std::string url_decode(const std::string& s, bool plus_is_space);
std::string url_encode(const std::string& s);

}  // namespace qsync::http
