// File: tests/support/tcp_proxy.cpp
// TcpProxy: one poll() thread that accepts on 127.0.0.1, connects each client to the target,
// queues every chunk it reads with the time it is due, sends it when due, and applies the faults
// the test asked for (see tcp_proxy.h).
#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

namespace qsync::test {
namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

void set_no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A blocking connection to 127.0.0.1:port; -1 when nothing listens there.
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in addr = loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  set_no_delay(fd);
  return fd;
}

bool send_whole(int fd, const std::vector<char>& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = loopback(0);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    const std::string why = std::strerror(errno);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw std::runtime_error("test TCP proxy: cannot listen on a 127.0.0.1 port: " + why);
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread(&TcpProxy::serve, this);
}

TcpProxy::~TcpProxy() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  const char byte = 1;
  while (::write(wake_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TcpProxy::set_delay(std::chrono::milliseconds per_chunk) {
  std::lock_guard<std::mutex> lock(mutex_);
  delay_ = per_chunk;
}

void TcpProxy::cut_after_bytes(int64_t bytes, CutStyle style) {
  std::lock_guard<std::mutex> lock(mutex_);
  cut_budget_ = std::max<int64_t>(bytes, 0);
  cut_budget_style_ = style;
}

int TcpProxy::cut_open_connections(CutStyle style) {
  std::unique_lock<std::mutex> lock(mutex_);
  cut_now_requested_ = true;
  cut_now_style_ = style;
  const char byte = 1;
  while (::write(wake_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  applied_.wait(lock, [&] { return !cut_now_requested_ || stopping_; });
  return cut_now_count_;
}

void TcpProxy::turn_away_for(std::chrono::milliseconds duration) {
  std::lock_guard<std::mutex> lock(mutex_);
  turn_away_until_ = Clock::now() + duration;
}

void TcpProxy::serve() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      if (cut_now_requested_) {
        cut_now_count_ = 0;
        for (Connection& c : connections_) {
          if (!c.closed) {
            cut(c, cut_now_style_);
            ++cut_now_count_;
          }
        }
        cut_now_requested_ = false;
        applied_.notify_all();
      }
    }
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    std::vector<std::pair<Connection*, int>> sides;  // fds[2 + i] is sides[i]
    for (Connection& c : connections_) {
      for (int s = 0; s < 2; ++s) {
        if (c.closed || c.ended[0] || c.ended[1]) continue;
        fds.push_back({c.fd[s], POLLIN, 0});
        sides.emplace_back(&c, s);
      }
    }
    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR) break;
    char drain[64];
    while (::read(wake_pipe_[0], drain, sizeof drain) > 0) {
    }
    if (fds[0].revents & POLLIN) accept_one();
    for (size_t i = 0; i < sides.size(); ++i) {
      auto [c, s] = sides[i];
      if (fds[2 + i].revents != 0 && !c->closed && !pump(*c, s)) c->ended[s] = true;
    }
    for (Connection& c : connections_) {
      if (!c.closed) deliver_due(c);
      const bool flushed = c.queue[0].empty() && c.queue[1].empty();
      if (!c.closed && (c.ended[0] || c.ended[1]) && flushed) close_connection(c);
    }
    connections_.remove_if([](const Connection& c) { return c.closed; });
  }
  for (Connection& c : connections_) {
    if (!c.closed) close_connection(c);
  }
  connections_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  applied_.notify_all();
}

void TcpProxy::accept_one() {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  bool turn_away = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    turn_away = Clock::now() < turn_away_until_;
  }
  const int target = turn_away ? -1 : connect_loopback(target_port_);
  if (target < 0) {  // turned away, or nothing listens at the target yet: the client reads EOF
    if (turn_away) ++turned_away_;
    ::close(fd);
    return;
  }
  set_no_delay(fd);
  Connection& c = connections_.emplace_back();
  c.fd[0] = fd;
  c.fd[1] = target;
  ++accepted_;
  ++open_;
}

bool TcpProxy::pump(Connection& c, int from) {
  std::vector<char> buffer(64 * 1024);
  const ssize_t n = ::recv(c.fd[from], buffer.data(), buffer.size(), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) return false;
  buffer.resize(static_cast<size_t>(n));
  Chunk chunk;
  std::lock_guard<std::mutex> lock(mutex_);
  if (cut_budget_ >= 0) {
    if (n >= cut_budget_) {
      buffer.resize(static_cast<size_t>(cut_budget_));
      chunk.cut_after = true;
      chunk.style = cut_budget_style_;
      cut_budget_ = -1;
    } else {
      cut_budget_ -= n;
    }
  }
  chunk.bytes = std::move(buffer);
  chunk.due = Clock::now() + delay_;
  c.queue[from].push_back(std::move(chunk));
  return true;
}

void TcpProxy::deliver_due(Connection& c) {
  const auto now = Clock::now();
  for (int s = 0; s < 2 && !c.closed; ++s) {
    while (!c.closed && !c.queue[s].empty() && c.queue[s].front().due <= now) {
      const Chunk chunk = std::move(c.queue[s].front());
      c.queue[s].pop_front();
      if (!send_whole(c.fd[1 - s], chunk.bytes)) {
        close_connection(c);
        return;
      }
      bytes_forwarded_ += static_cast<int64_t>(chunk.bytes.size());
      if (chunk.cut_after) cut(c, chunk.style);
    }
  }
}

void TcpProxy::cut(Connection& c, CutStyle style) {
  if (style == CutStyle::kReset) {
    const linger abort{1, 0};
    for (int fd : c.fd) ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  }
  ++cut_;
  close_connection(c);
}

void TcpProxy::close_connection(Connection& c) {
  for (int& fd : c.fd) {
    ::close(fd);
    fd = -1;
  }
  c.queue[0].clear();
  c.queue[1].clear();
  c.closed = true;
  --open_;
}

int TcpProxy::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  for (const Connection& c : connections_) {
    for (const auto& queue : c.queue) {
      if (!queue.empty() && (!next || queue.front().due < *next)) next = queue.front().due;
    }
  }
  if (!next) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

}  // namespace qsync::test
