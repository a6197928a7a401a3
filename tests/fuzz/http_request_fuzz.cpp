// File: tests/fuzz/http_request_fuzz.cpp
// Fuzzes the HTTP/1.1 request parser of the operator's health and metrics server and the API
// test server (operator/http/http_message.h: read_http_request): the input is what a client
// sent on one connection, read until the parser stops (end of input or an error status).
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "operator/http/http_message.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A socket buffer holds the whole input at once (inputs are capped by -max_len).
  if (size > 100000) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  const int buffer = 1 << 20;
  ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fds[0], data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;  // libFuzzer's -timeout ticks with SIGALRM
    if (n <= 0) std::abort();
    sent += size_t(n);
  }
  ::shutdown(fds[0], SHUT_WR);
  qsync::fuzz::expect_clear_errors("read_http_request", [&] {
    qsync::http::SocketReader reader(fds[1]);
    for (int requests = 0; requests < 64; ++requests) {
      qsync::http::HttpRequest req;
      bool keep_alive = false;
      const int status = qsync::http::read_http_request(reader, req, keep_alive);
      if (status != 0) {
        if (status != -1 && qsync::http::reason_phrase(status) == nullptr) std::abort();
        break;
      }
      (void)req.header("content-type");
      (void)req.param("watch");
    }
  });
  ::close(fds[0]);
  ::close(fds[1]);
  return 0;
}
