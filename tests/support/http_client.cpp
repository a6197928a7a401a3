// File: tests/support/http_client.cpp
// http_get over a blocking IPv4 socket with send/receive timeouts; reads until the server closes
// the connection (the request says Connection: close), then decodes a chunked body if needed.
#include "tests/support/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace qsync::test {
namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string decode_chunked(const std::string& body, const std::string& url) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) throw std::runtime_error("truncated chunked response from " + url);
    const size_t size = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) return out;
    if (eol + 2 + size > body.size()) throw std::runtime_error("truncated chunk in response from " + url);
    out.append(body, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
}

}  // namespace

HttpResponse http_get(const std::string& host, int port, const std::string& target,
                      std::chrono::milliseconds timeout) {
  const std::string url = "http://" + host + ":" + std::to_string(port) + target;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    throw std::invalid_argument("http_get needs an IPv4 address, got '" + host + "'");
  Socket sock(::socket(AF_INET, SOCK_STREAM, 0));
  if (sock.fd() < 0) throw std::runtime_error(std::string("socket() failed: ") + std::strerror(errno));
  timeval tv{};
  tv.tv_sec = long(timeout.count() / 1000);
  tv.tv_usec = long(timeout.count() % 1000) * 1000;
  ::setsockopt(sock.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(sock.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw std::runtime_error("cannot connect to " + url + ": " + std::strerror(errno));

  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
                              "\r\nConnection: close\r\nAccept: */*\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(sock.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("cannot send request to " + url + ": " + std::strerror(errno));
    sent += size_t(n);
  }
  std::string raw;
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(sock.fd(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot read the response from " + url + ": " +
                               (errno == EAGAIN ? std::string("timed out") : std::strerror(errno)));
    }
    raw.append(buf, size_t(n));
  }

  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0)
    throw std::runtime_error("malformed HTTP response from " + url + ": '" + raw.substr(0, 200) + "'");
  HttpResponse r;
  r.status = std::stoi(raw.substr(raw.find(' ') + 1, 3));
  const std::string head = lower(raw.substr(0, head_end));
  r.body = raw.substr(head_end + 4);
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) r.body = decode_chunked(r.body, url);
  return r;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace qsync::test
