// File: worker/dist/kv_store.h
// The rendezvous key-value store: a small TCP server that rank 0 runs on a background thread
// (one thread per connection, so blocking gets from many ranks are served at once) and the client
// every rank uses to reach it. The wire protocol is length-prefixed binary (see kv_store.cpp).
// Errors name the address, the key, the timeout and the rank that is asking.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/dist/rendezvous.h"

namespace qsync {

// A get or wait that ended without its keys: the timeout passed, or the server stopped while the
// call was waiting (rank 0 gave up or exited). missing() lists the keys that were not set.
class StoreWaitError : public std::runtime_error {
 public:
  StoreWaitError(const std::string& message, std::vector<std::string> missing, bool server_stopped)
      : std::runtime_error(message), missing_(std::move(missing)), server_stopped_(server_stopped) {}
  const std::vector<std::string>& missing() const { return missing_; }
  bool server_stopped() const { return server_stopped_; }

 private:
  std::vector<std::string> missing_;
  bool server_stopped_;
};

// The server. Binds bind_host:port (port 0 picks a free port; port() tells which) and serves on a
// background thread until destroyed. Throws std::runtime_error when the port is in use ("port 29500
// on 0.0.0.0 is in use: pick another MASTER_PORT"). SO_REUSEADDR is set: on Linux a port with a
// live listener is still refused (so a second server or another service is detected), while the
// TIME_WAIT connections a previous run left behind do not block a restart on the same port.
class KeyValueServer {
 public:
  KeyValueServer(const std::string& bind_host, int port);
  ~KeyValueServer();  // stop()
  KeyValueServer(const KeyValueServer&) = delete;
  KeyValueServer& operator=(const KeyValueServer&) = delete;

  int port() const;
  // Connections currently open.
  int connection_count() const;
  // Waits until at most `count` connections are open or the timeout passes; true when reached.
  bool wait_for_connections_at_most(int count, std::chrono::milliseconds timeout) const;
  // Answers every pending get/wait with "server stopped", closes every connection and joins the
  // threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The client: one TCP connection to the server. The constructor retries connecting until the
// timeout passes (the server may start later than this rank, or a load balancer in front of it
// may close connections until it is up). `who` says who is asking, e.g. "rank 1 of 4", and goes
// into every error. get/wait/add block server-side; calls from several threads are serialised, so
// give each thread that blocks on keys another thread sets its own client.
// A lost connection (closed or reset on the way) is reconnected, for at most min(timeout, 10 s)
// per loss and 3 times per call, and set/get/wait/check are sent again (they are idempotent; a
// get or wait only for the time it has left). An add whose request may already have reached the
// server is not repeated: it fails naming the store, the key and the cause.
class KeyValueClient : public KeyValueStore {
 public:
  KeyValueClient(const std::string& host, int port, std::chrono::milliseconds timeout,
                 std::string who);
  ~KeyValueClient() override;
  KeyValueClient(const KeyValueClient&) = delete;
  KeyValueClient& operator=(const KeyValueClient&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key) override;  // waits up to timeout()
  void wait(const std::vector<std::string>& keys) override;  // waits up to timeout()
  int64_t add(const std::string& key, int64_t delta) override;

  // The same with an explicit timeout. Timeouts throw StoreWaitError.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // True when the key exists now (does not wait).
  bool check(const std::string& key);

  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& address() const { return address_; }  // "host:port"

  // How many times a lost connection was reconnected so far.
  int reconnections() const { return reconnections_; }

 private:
  using Clock = std::chrono::steady_clock;
  // One connect and magic exchange: the socket, or -1 and `error` when a retry may help; throws
  // when the far end answers but is not a rendezvous store.
  int open_connection(Clock::time_point deadline, std::string* error) const;
  // Runs `exchange` (one request and its answer; `what` names it in errors); on a lost connection
  // reconnects and runs it again when `repeatable` or when nothing was sent yet.
  template <typename Exchange>
  auto call(const std::string& what, bool repeatable, Exchange&& exchange);
  void reconnect(const std::string& what, const std::string& cause);
  std::string lost_message(const std::string& what, const std::string& cause) const;
  std::vector<std::string> read_missing(Clock::time_point deadline);
  StoreWaitError wait_error(bool stopped, std::vector<std::string> missing,
                            std::chrono::milliseconds timeout) const;
  void send_request(const std::vector<char>& request);
  void receive(void* data, size_t size, Clock::time_point deadline);
  [[noreturn]] void bad_answer(const std::string& what);
  void close_connection();

  std::string host_;
  int port_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  std::string who_;
  int fd_ = -1;
  bool request_sent_ = false;  // in the current attempt of a call
  std::atomic<int> reconnections_{0};
  std::mutex mutex_;
};

// "60 s", "1.5 s", "300 ms": durations the way errors print them.
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace qsync
