// File: operator/http/http_message.h
// The wire side of the HTTP/1.1 server (internal to operator/http): buffered socket reads, the
// request parser (request line, headers, query string, Content-Length or chunked body),
// status reason phrases and a send loop that survives short writes.
#pragma once

#include <string>

#include "operator/http/http_server.h"

namespace qsync::http {

// Buffered reads from one socket.
class SocketReader {
 public:
  explicit SocketReader(int fd) : fd_(fd) {}
  // Reads until `delimiter` is buffered; sets `out` to the text before it and consumes both.
  // False when the peer closed, the socket failed, or more than `limit` bytes came first.
  bool read_until(const std::string& delimiter, size_t limit, std::string& out);
  bool read_exact(size_t n, std::string& out);  // appends n bytes to `out`

 private:
  bool fill();
  int fd_;
  std::string buffer_;
};

// Reads one request into `req`. Returns 0 on success, -1 when the connection ended (or broke)
// before a whole request arrived, or the HTTP status to answer a malformed request with (400,
// 413) before closing. `keep_alive` says whether the client lets the connection stay open.
int read_http_request(SocketReader& reader, HttpRequest& req, bool& keep_alive);

const char* reason_phrase(int status);
// Sends all of `data` (MSG_NOSIGNAL); false once the peer is gone.
bool send_all(int fd, const std::string& data);
std::string lower_case(std::string s);

}  // namespace qsync::http
