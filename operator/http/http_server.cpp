// File: operator/http/http_server.cpp
// The HTTP/1.1 server behind http_server.h: an accept thread hands each connection to its own
// thread, which reads requests (Content-Length or chunked bodies), calls the handler and writes
// the answer whole or as a chunked stream, keeping the connection alive until the client closes
// it, asks for "Connection: close", or the server stops. Only the connection's own thread closes
// its socket; stop() and drop_connections() shut sockets down so blocked reads return.
#include "operator/http/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "operator/http/http_message.h"

namespace qsync::http {
namespace {

struct Connection {
  int fd = -1;
  std::string peer;
  std::thread thread;
  std::atomic<bool> done{false};
  std::atomic<bool> shut{false};  // shut down by stop() or drop_connections()
};

class ChunkedStream : public ResponseStream {
 public:
  ChunkedStream(Connection& conn, const std::atomic<bool>& stopping) : conn_(conn), stopping_(stopping) {}
  bool write(const std::string& chunk) override {
    if (broken_ || stopping_ || conn_.shut) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the body
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    if (!send_all(conn_.fd, std::string(size) + chunk + "\r\n")) broken_ = true;
    return !broken_;
  }
  bool client_gone() override {
    if (broken_ || stopping_ || conn_.shut) return true;
    pollfd p{conn_.fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0) {
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return broken_ = true;
      char c;
      if (p.revents & POLLIN) {
        ssize_t n = ::recv(conn_.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return broken_ = true;
      }
    }
    return false;
  }
  bool broken() const { return broken_; }

 private:
  Connection& conn_;
  const std::atomic<bool>& stopping_;
  bool broken_ = false;
};

}  // namespace

struct HttpServer::Impl {
  Handler handler;
  std::string host;
  int port = 0;
  int listen_fd = -1;
  std::atomic<bool> stopping{false};
  std::thread accept_thread;
  std::mutex mu;
  std::list<std::unique_ptr<Connection>> connections;

  void accept_loop();
  void serve(Connection& conn);
  void reap_finished();
};

HttpServer::HttpServer(const std::string& host, int port, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->host = host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error("HttpServer: cannot resolve " + host + ":" + port_text + ": " + gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      impl_->listen_fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (impl_->listen_fd < 0) {
    throw std::runtime_error("HttpServer: cannot listen on " + host + ":" + port_text + ": " + last_error +
                             " (is the port in use? pass port 0 for any free port)");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl_->port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

std::string HttpServer::url() const {
  std::string h = impl_->host.empty() || impl_->host == "0.0.0.0" ? "127.0.0.1" : impl_->host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return "http://" + h + ":" + std::to_string(impl_->port);
}

void HttpServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  ::shutdown(impl_->listen_fd, SHUT_RDWR);
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  ::close(impl_->listen_fd);
  drop_connections();
  std::list<std::unique_ptr<Connection>> all;
  {
    std::lock_guard lock(impl_->mu);
    all.swap(impl_->connections);
  }
  for (auto& c : all) {
    if (c->thread.joinable()) c->thread.join();
  }
}

void HttpServer::drop_connections() {
  std::lock_guard lock(impl_->mu);
  for (auto& c : impl_->connections) {
    if (c->fd >= 0 && !c->done) {
      c->shut = true;
      ::shutdown(c->fd, SHUT_RDWR);
    }
  }
}

void HttpServer::Impl::reap_finished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard lock(mu);
    for (auto it = connections.begin(); it != connections.end();) {
      if ((*it)->done) {
        finished.push_back(std::move(*it));
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) c->thread.join();
}

void HttpServer::Impl::accept_loop() {
  while (!stopping) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down by stop()
    }
    if (stopping) {
      ::close(fd);
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char host_text[INET6_ADDRSTRLEN] = "?";
    int peer_port = 0;
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, host_text, sizeof host_text);
      peer_port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host_text, sizeof host_text);
      peer_port = ntohs(a->sin6_port);
    }
    reap_finished();
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    conn->peer = std::string(host_text) + ":" + std::to_string(peer_port);
    Connection* raw = conn.get();
    std::lock_guard lock(mu);
    connections.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { serve(*raw); });
  }
}

void HttpServer::Impl::serve(Connection& conn) {
  SocketReader reader(conn.fd);
  for (;;) {
    HttpRequest req;
    req.peer = conn.peer;
    bool keep_alive = true;
    int error = read_http_request(reader, req, keep_alive);
    if (error != 0) {
      if (error > 0) {
        std::string body = std::string(reason_phrase(error)) + "\n";
        send_all(conn.fd, "HTTP/1.1 " + std::to_string(error) + " " + reason_phrase(error) +
                              "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body);
      }
      break;
    }
    HandlerResult result;
    try {
      result = handler(req);
    } catch (const std::exception& e) {
      result = {};
      result.response.status = 500;
      result.response.headers["Content-Type"] = "text/plain";
      result.response.body = std::string("handler failed: ") + e.what() + "\n";
    }
    if (stopping) keep_alive = false;
    HttpResponse& res = result.response;
    std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
    for (const auto& [name, value] : res.headers) {
      std::string l = lower_case(name);
      if (l == "content-length" || l == "transfer-encoding" || l == "connection") continue;
      head += name + ": " + value + "\r\n";
    }
    if (!keep_alive) head += "Connection: close\r\n";
    if (result.stream) {
      head += "Transfer-Encoding: chunked\r\n\r\n";
      if (!send_all(conn.fd, head)) break;
      ChunkedStream stream(conn, stopping);
      try {
        result.stream(stream);
      } catch (const std::exception&) {
        keep_alive = false;  // the body is cut short: the client sees the connection end
      }
      if (stream.broken() || conn.shut || stopping || !keep_alive) break;
      if (!send_all(conn.fd, "0\r\n\r\n")) break;
    } else {
      head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n";
      if (!send_all(conn.fd, req.method == "HEAD" ? head : head + res.body)) break;
    }
    if (!keep_alive) break;
  }
  std::lock_guard lock(mu);
  ::close(conn.fd);
  conn.fd = -1;
  conn.done = true;
}

}  // namespace qsync::http
