// File: worker/dist/kv_store.cpp
// KeyValueClient: one TCP connection to the rendezvous store, retried until the timeout while the
// server is not up yet, then request/response calls in the kv_protocol.h wire format; a
// connection lost on the way is reconnected and the call repeated when that is safe.
#include "worker/dist/kv_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "worker/dist/kv_protocol.h"

namespace qsync {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long past its own timeout a blocking call waits for the server's answer.
constexpr milliseconds kAnswerGrace{5000};
// A lost connection is reconnected for at most min(timeout, this) each time, at most
// kMaxReconnects times in one call (a connection that keeps dropping fails the call).
constexpr milliseconds kReconnectWindow{10000};
constexpr int kMaxReconnects = 3;

// Thrown inside a call when its connection closes or fails; the call reconnects or reports it.
struct LostConnection {
  std::string cause;
};

milliseconds time_left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// One attempt at every address `host` resolves to; -1 and `error` when none answered.
int try_connect(const std::string& host, int port, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    *error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        pollfd pfd{fd, POLLOUT, 0};
        const int r = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
        socklen_t len = sizeof err;
        if (r <= 0) {
          err = ETIMEDOUT;
        } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      *error = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

void check_sizes(const std::string& key, size_t value_size = 0) {
  if (key.size() > kv::kMaxKeyBytes) {
    throw std::invalid_argument("rendezvous store key '" + key.substr(0, 64) + "...' is " +
                                std::to_string(key.size()) + " bytes: keys are at most " +
                                std::to_string(kv::kMaxKeyBytes) + " bytes");
  }
  if (value_size > kv::kMaxValueBytes) {
    throw std::invalid_argument("the value for rendezvous store key '" + key + "' is " +
                                std::to_string(value_size) + " bytes: values are at most " +
                                std::to_string(kv::kMaxValueBytes) + " bytes");
  }
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out = keys.size() == 1 ? "key " : "keys ";
  const size_t shown = std::min<size_t>(keys.size(), 4);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > shown) out += " (and " + std::to_string(keys.size() - shown) + " more)";
  return out;
}

}  // namespace

std::string format_duration(milliseconds duration) {
  const int64_t ms = duration.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ms) / 1000.0);
  return text;
}

KeyValueClient::KeyValueClient(const std::string& host, int port, milliseconds timeout,
                               std::string who)
    : host_(host),
      port_(port),
      address_((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
               std::to_string(port)),
      timeout_(timeout),
      who_(std::move(who)) {
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "no attempt made";
  milliseconds backoff{20};
  while ((fd_ = open_connection(deadline, &last_error)) < 0) {
    const milliseconds left = time_left(deadline);
    if (left.count() <= 0) {
      throw std::runtime_error("could not reach the rendezvous master " + address_ + " within " +
                               format_duration(timeout) + " (" + who_ +
                               "): check MASTER_ADDR/MASTER_PORT and that rank 0 is running "
                               "(last error: " + last_error + ")");
    }
    std::this_thread::sleep_for(std::min(backoff, left));
    backoff = std::min(backoff * 2, milliseconds(200));
  }
}

KeyValueClient::~KeyValueClient() { close_connection(); }

int KeyValueClient::open_connection(Clock::time_point deadline, std::string* error) const {
  const int fd = try_connect(host_, port_, deadline, error);
  if (fd < 0) return -1;
  char magic[sizeof kv::kMagic];
  const auto answer_by = std::max(deadline, Clock::now() + kAnswerGrace);
  kv::IoResult got = kv::send_all(fd, kv::kMagic, sizeof kv::kMagic);
  if (got == kv::IoResult::kOk) got = kv::recv_all(fd, magic, sizeof magic, answer_by);
  if (got == kv::IoResult::kOk && std::memcmp(magic, kv::kMagic, sizeof magic) == 0) return fd;
  ::close(fd);
  if (got == kv::IoResult::kOk) {
    throw std::runtime_error("the service at " + address_ + " (" + who_ +
                             ") did not answer as a QSync rendezvous store: check that "
                             "MASTER_PORT is the port rank 0 listens on");
  }
  *error = got == kv::IoResult::kTimedOut
               ? "connected, but no answer to the greeting within " + format_duration(kAnswerGrace)
               : "connected, but the connection was closed before the store answered";
  return -1;
}

void KeyValueClient::close_connection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string KeyValueClient::lost_message(const std::string& what, const std::string& cause) const {
  return "lost the connection to the rendezvous master " + address_ + " (" + who_ + ") while " +
         what + " (" + cause + ")";
}

void KeyValueClient::reconnect(const std::string& what, const std::string& cause) {
  const milliseconds window = std::min(timeout_, kReconnectWindow);
  const auto deadline = Clock::now() + window;
  std::string last_error = "no attempt made";
  milliseconds backoff{20};
  while ((fd_ = open_connection(deadline, &last_error)) < 0) {
    const milliseconds left = time_left(deadline);
    if (left.count() <= 0) {
      throw std::runtime_error(lost_message(what, cause) + " and could not reconnect within " +
                               format_duration(window) + " (last error: " + last_error +
                               "): rank 0 has exited or the network to it is down; see rank 0's "
                               "log and check MASTER_ADDR/MASTER_PORT");
    }
    std::this_thread::sleep_for(std::min(backoff, left));
    backoff = std::min(backoff * 2, milliseconds(200));
  }
  ++reconnections_;
}

template <typename Exchange>
auto KeyValueClient::call(const std::string& what, bool repeatable, Exchange&& exchange) {
  for (int reconnects = 0;; ++reconnects) {
    request_sent_ = false;
    try {
      if (fd_ < 0) throw LostConnection{"an earlier error closed the connection"};
      return exchange();
    } catch (const LostConnection& lost) {
      close_connection();
      if (request_sent_ && !repeatable) {
        throw std::runtime_error(lost_message(what, lost.cause) +
                                 ": the request may have reached the store, and repeating it could "
                                 "apply it twice, so it is not retried; check the network to rank "
                                 "0 and see its log, then restart this rank");
      }
      if (reconnects == kMaxReconnects) {
        throw std::runtime_error(lost_message(what, lost.cause) + " again after " +
                                 std::to_string(kMaxReconnects) +
                                 " reconnections in one call: the network to rank 0 keeps "
                                 "dropping connections; check it and see rank 0's log");
      }
      reconnect(what, lost.cause);
    }
  }
}

void KeyValueClient::bad_answer(const std::string& what) {
  close_connection();
  throw std::runtime_error("the rendezvous master " + address_ + " sent " + who_ +
                           " an answer outside the store's protocol while " + what +
                           ": check that MASTER_PORT is the port rank 0 listens on");
}

void KeyValueClient::send_request(const std::vector<char>& request) {
  request_sent_ = true;  // a part may reach the server even when sending fails
  errno = 0;
  if (kv::send_all(fd_, request.data(), request.size()) != kv::IoResult::kOk) {
    throw LostConnection{std::string("sending failed: ") + std::strerror(errno)};
  }
}

void KeyValueClient::receive(void* data, size_t size, Clock::time_point deadline) {
  errno = 0;
  const kv::IoResult r = kv::recv_all(fd_, data, size, deadline);
  if (r == kv::IoResult::kTimedOut) {
    close_connection();
    throw std::runtime_error("the rendezvous master " + address_ + " did not answer " + who_ +
                             " in time: rank 0 may be hung or overloaded");
  }
  if (r == kv::IoResult::kOk) return;
  const int err = errno;
  throw LostConnection{r == kv::IoResult::kClosed && err != ECONNRESET
                           ? "the other end closed it"
                           : std::string(std::strerror(err))};
}

void KeyValueClient::set(const std::string& key, const std::vector<char>& value) {
  check_sizes(key, value.size());
  kv::Writer request;
  request.u8(kv::kSet).str(key).bytes(value);
  const std::string what = "setting key '" + key + "'";
  std::lock_guard<std::mutex> lock(mutex_);
  call(what, true, [&] {
    send_request(request.data());
    uint8_t status = 0;
    receive(&status, 1, Clock::now() + timeout_ + kAnswerGrace);
    if (status != kv::kOk) bad_answer(what);
  });
}

std::vector<char> KeyValueClient::get(const std::string& key) { return get(key, timeout_); }

void KeyValueClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

std::vector<std::string> KeyValueClient::read_missing(Clock::time_point deadline) {
  unsigned char n_bytes[4];
  receive(n_bytes, 4, deadline);
  std::vector<std::string> missing;
  for (uint32_t i = 0, n = kv::decode_u32(n_bytes); i < n; ++i) {
    unsigned char len_bytes[4];
    receive(len_bytes, 4, deadline);
    const uint32_t len = kv::decode_u32(len_bytes);
    if (len > kv::kMaxKeyBytes) bad_answer("reading an answer (a key that is too long)");
    std::string key(len, '\0');
    receive(key.data(), len, deadline);
    missing.push_back(std::move(key));
  }
  return missing;
}

StoreWaitError KeyValueClient::wait_error(bool stopped, std::vector<std::string> missing,
                                          milliseconds timeout) const {
  const std::string keys = quote_keys(missing);  // before `missing` is moved from
  if (stopped) {
    return StoreWaitError("the rendezvous store at " + address_ + " stopped while " + who_ +
                              " waited for " + keys + ": rank 0 gave up or exited; see its log",
                          std::move(missing), true);
  }
  return StoreWaitError("timed out after " + format_duration(timeout) + " waiting for " + keys +
                            " in the rendezvous store at " + address_ + " (" + who_ +
                            "): the rank that sets it has not got that far, or has died",
                        std::move(missing), false);
}

std::vector<char> KeyValueClient::get(const std::string& key, milliseconds timeout) {
  check_sizes(key);
  const std::string what = "getting key '" + key + "'";
  const auto until = Clock::now() + timeout;  // a repeated request waits only for what is left
  std::lock_guard<std::mutex> lock(mutex_);
  return call(what, true, [&] {
    const milliseconds left = time_left(until);
    kv::Writer request;
    request.u8(kv::kGet).str(key).i64(left.count());
    send_request(request.data());
    const auto deadline = Clock::now() + left + kAnswerGrace;
    uint8_t status = 0;
    receive(&status, 1, deadline);
    if (status == kv::kTimeout || status == kv::kStopped) {
      throw wait_error(status == kv::kStopped, read_missing(deadline), timeout);
    }
    if (status != kv::kOk) bad_answer(what);
    unsigned char size_bytes[4];
    receive(size_bytes, 4, deadline);
    const uint32_t size = kv::decode_u32(size_bytes);
    if (size > kv::kMaxValueBytes) bad_answer(what + " (a value that is too large)");
    std::vector<char> value(size);
    receive(value.data(), size, deadline);
    return value;
  });
}

void KeyValueClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  for (const std::string& k : keys) check_sizes(k);
  const std::string what = "waiting for " + quote_keys(keys);
  const auto until = Clock::now() + timeout;
  std::lock_guard<std::mutex> lock(mutex_);
  call(what, true, [&] {
    const milliseconds left = time_left(until);
    kv::Writer request;
    request.u8(kv::kWait).u32(static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) request.str(k);
    request.i64(left.count());
    send_request(request.data());
    const auto deadline = Clock::now() + left + kAnswerGrace;
    uint8_t status = 0;
    receive(&status, 1, deadline);
    if (status == kv::kOk) return;
    if (status != kv::kTimeout && status != kv::kStopped) bad_answer(what);
    throw wait_error(status == kv::kStopped, read_missing(deadline), timeout);
  });
}

int64_t KeyValueClient::add(const std::string& key, int64_t delta) {
  check_sizes(key);
  kv::Writer request;
  request.u8(kv::kAdd).str(key).i64(delta);
  const std::string what = "adding to key '" + key + "'";
  std::lock_guard<std::mutex> lock(mutex_);
  return call(what, false, [&]() -> int64_t {
    send_request(request.data());
    const auto deadline = Clock::now() + timeout_ + kAnswerGrace;
    uint8_t status = 0;
    receive(&status, 1, deadline);
    unsigned char bytes[8];
    if (status == kv::kOk) {
      receive(bytes, 8, deadline);
      return kv::decode_i64(bytes);
    }
    if (status != kv::kBadRequest) bad_answer(what);
    receive(bytes, 4, deadline);
    const uint32_t length = kv::decode_u32(bytes);
    if (length > kv::kMaxKeyBytes) bad_answer(what);
    std::string message(length, '\0');
    receive(message.data(), message.size(), deadline);
    throw std::runtime_error("rendezvous store at " + address_ + ": " + message);
  });
}

bool KeyValueClient::check(const std::string& key) {
  check_sizes(key);
  kv::Writer request;
  request.u8(kv::kCheck).str(key);
  const std::string what = "checking key '" + key + "'";
  std::lock_guard<std::mutex> lock(mutex_);
  return call(what, true, [&] {
    send_request(request.data());
    unsigned char answer[2];
    receive(answer, 2, Clock::now() + timeout_ + kAnswerGrace);
    if (answer[0] != kv::kOk) bad_answer(what);
    return answer[1] != 0;
  });
}

}  // namespace qsync
