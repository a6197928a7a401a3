// File: worker/dist/kv_store_server.cpp
// KeyValueServer: the rendezvous store rank 0 serves. An accept thread (woken through a pipe to
// stop) hands each connection to its own thread; gets and waits block on a condition variable until
// their keys appear, their timeout passes, or the server stops (then they answer kStopped).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include "worker/dist/kv_protocol.h"
#include "worker/dist/kv_store.h"

namespace qsync {
namespace {

using Clock = std::chrono::steady_clock;

int bind_listener(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) {
    throw std::runtime_error("cannot listen on '" + host + "' for the rendezvous store: " +
                             ::gai_strerror(rc) + ": set MASTER_ADDR to this host's address");
  }
  int last_errno = 0;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    // Linux still refuses a port that has a live listener with SO_REUSEADDR set; it only lets us
    // reuse one whose old connections sit in TIME_WAIT (a restarted rank 0).
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      *bound_port = ntohs(addr.ss_family == AF_INET6
                              ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      ::freeaddrinfo(found);
      return fd;
    }
    last_errno = errno;
    ::close(fd);
    if (last_errno == EADDRINUSE) break;
  }
  ::freeaddrinfo(found);
  const std::string where = "port " + port_text + " on " + host;
  if (last_errno == EADDRINUSE) {
    throw std::runtime_error(where + " is in use: pick another MASTER_PORT (another job, or "
                             "another rank 0, is listening there)");
  }
  if (last_errno == EACCES) {
    throw std::runtime_error(where + " needs root to listen on: pick a MASTER_PORT above 1023");
  }
  if (last_errno == EADDRNOTAVAIL) {
    throw std::runtime_error("cannot listen on " + where + ": " + host +
                             " is not an address of this machine: check MASTER_ADDR");
  }
  throw std::runtime_error("cannot listen on " + where + ": " + std::strerror(last_errno));
}

}  // namespace

struct KeyValueServer::Impl {
  struct Connection {
    int fd = -1;
    bool done = false;
    std::thread thread;
  };

  std::string host;
  int port = 0;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  mutable std::mutex mutex;
  mutable std::condition_variable cv;
  std::map<std::string, std::vector<char>> data;
  std::list<Connection> connections;
  int open = 0;
  bool stopping = false;
  std::thread acceptor;

  void accept_loop();
  void serve(Connection* connection);
  bool handle(int fd, uint8_t op);
  bool answer_wait(int fd, const std::vector<std::string>& keys, int64_t timeout_ms,
                   bool want_value);
};

void KeyValueServer::Impl::accept_loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) {
      ::close(fd);
      return;
    }
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->done) {
        it->thread.join();  // it has already left serve()'s last critical section
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    Connection& c = connections.emplace_back();
    c.fd = fd;
    ++open;
    c.thread = std::thread(&Impl::serve, this, &c);
  }
}

void KeyValueServer::Impl::serve(Connection* connection) {
  const int fd = connection->fd;
  char magic[sizeof kv::kMagic];
  if (kv::recv_all(fd, magic, sizeof magic, std::nullopt) == kv::IoResult::kOk &&
      std::memcmp(magic, kv::kMagic, sizeof magic) == 0 &&
      kv::send_all(fd, kv::kMagic, sizeof kv::kMagic) == kv::IoResult::kOk) {
    while (true) {
      kv::SocketReader reader(fd, std::nullopt);
      const uint8_t op = reader.u8();
      if (!reader.ok() || !handle(fd, op)) break;
    }
  }
  std::lock_guard<std::mutex> lock(mutex);
  ::close(fd);
  connection->fd = -1;
  connection->done = true;
  --open;
  cv.notify_all();
}

bool KeyValueServer::Impl::answer_wait(int fd, const std::vector<std::string>& keys,
                                       int64_t timeout_ms, bool want_value) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(
                                           std::clamp<int64_t>(timeout_ms, 0, int64_t{1} << 40));
  std::unique_lock<std::mutex> lock(mutex);
  const auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data.count(k); });
  };
  cv.wait_until(lock, deadline, [&] { return stopping || all_present(); });
  kv::Writer out;
  if (all_present()) {
    out.u8(kv::kOk);
    if (want_value) out.bytes(data[keys.front()]);
  } else {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (!data.count(k)) missing.push_back(k);
    }
    out.u8(stopping ? kv::kStopped : kv::kTimeout).u32(static_cast<uint32_t>(missing.size()));
    for (const std::string& k : missing) out.str(k);
  }
  lock.unlock();
  return kv::send_all(fd, out.data().data(), out.data().size()) == kv::IoResult::kOk;
}

bool KeyValueServer::Impl::handle(int fd, uint8_t op) {
  kv::SocketReader in(fd, std::nullopt);
  kv::Writer out;
  switch (op) {
    case kv::kSet: {
      std::string key = in.str(kv::kMaxKeyBytes);
      std::vector<char> value = in.bytes(kv::kMaxValueBytes);
      if (!in.ok()) return false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        data[std::move(key)] = std::move(value);
      }
      cv.notify_all();
      out.u8(kv::kOk);
      break;
    }
    case kv::kGet: {
      std::string key = in.str(kv::kMaxKeyBytes);
      const int64_t timeout_ms = in.i64();
      return in.ok() && answer_wait(fd, {key}, timeout_ms, true);
    }
    case kv::kWait: {
      const uint32_t n = in.u32();
      if (!in.ok() || n > kv::kMaxKeysPerWait) return false;
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n && in.ok(); ++i) keys.push_back(in.str(kv::kMaxKeyBytes));
      const int64_t timeout_ms = in.i64();
      return in.ok() && answer_wait(fd, keys, timeout_ms, false);
    }
    case kv::kAdd: {
      const std::string key = in.str(kv::kMaxKeyBytes);
      const int64_t delta = in.i64();
      if (!in.ok()) return false;
      std::unique_lock<std::mutex> lock(mutex);
      std::vector<char>& stored = data[key];
      int64_t value = 0;
      const auto parsed = std::from_chars(stored.data(), stored.data() + stored.size(), value);
      if (!stored.empty() &&
          (parsed.ec != std::errc() || parsed.ptr != stored.data() + stored.size())) {
        lock.unlock();
        out.u8(kv::kBadRequest).str("key '" + key + "' holds a value that is not a counter: "
                                    "use another key for add()");
        break;
      }
      if (__builtin_add_overflow(value, delta, &value)) {  // signed overflow: undefined behaviour
        lock.unlock();
        out.u8(kv::kBadRequest).str("counter '" + key + "' would leave the 64-bit range: use another key for add()");
        break;
      }
      const std::string text = std::to_string(value);
      stored.assign(text.begin(), text.end());
      lock.unlock();
      cv.notify_all();
      out.u8(kv::kOk).i64(value);
      break;
    }
    case kv::kCheck: {
      const std::string key = in.str(kv::kMaxKeyBytes);
      if (!in.ok()) return false;
      std::lock_guard<std::mutex> lock(mutex);
      out.u8(kv::kOk).u8(data.count(key) ? 1 : 0);
      break;
    }
    default:
      return false;  // not our protocol: drop the connection
  }
  return kv::send_all(fd, out.data().data(), out.data().size()) == kv::IoResult::kOk;
}

KeyValueServer::KeyValueServer(const std::string& bind_host, int port)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = bind_host;
  impl_->listen_fd = bind_listener(bind_host, port, &impl_->port);
  if (::pipe2(impl_->wake_pipe, O_CLOEXEC) != 0) {
    ::close(impl_->listen_fd);
    throw std::runtime_error(std::string("rendezvous store: pipe2 failed: ") + std::strerror(errno));
  }
  impl_->acceptor = std::thread(&Impl::accept_loop, impl_.get());
}

KeyValueServer::~KeyValueServer() { stop(); }

int KeyValueServer::port() const { return impl_->port; }

int KeyValueServer::connection_count() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->open;
}

bool KeyValueServer::wait_for_connections_at_most(int count,
                                                  std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->open <= count; });
}

void KeyValueServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.stopping) return;
    s.stopping = true;
  }
  s.cv.notify_all();  // pending gets and waits answer kStopped
  const char byte = 1;
  while (::write(s.wake_pipe[1], &byte, 1) < 0 && errno == EINTR) {
  }
  s.acceptor.join();
  {
    // Half-close first so the kStopped answers still go out, then cut whoever is left.
    std::unique_lock<std::mutex> lock(s.mutex);
    for (Impl::Connection& c : s.connections) {
      if (!c.done) ::shutdown(c.fd, SHUT_RD);
    }
    if (!s.cv.wait_for(lock, std::chrono::seconds(2), [&] { return s.open == 0; })) {
      for (Impl::Connection& c : s.connections) {
        if (!c.done) ::shutdown(c.fd, SHUT_RDWR);
      }
    }
  }
  for (Impl::Connection& c : s.connections) c.thread.join();
  s.connections.clear();
  ::close(s.listen_fd);
  ::close(s.wake_pipe[0]);
  ::close(s.wake_pipe[1]);
}

}  // namespace qsync
