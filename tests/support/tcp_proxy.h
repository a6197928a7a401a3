// File: tests/support/tcp_proxy.h
// A TCP proxy for network-fault tests: it listens on a free 127.0.0.1 port and forwards each
// connection to 127.0.0.1:<target port>, and on the test's word it delays every forwarded chunk,
// cuts a connection after a number of forwarded bytes or at once (FIN, or RST through
// SO_LINGER 0), or turns new connections away for a while (accepted and closed at once). One
// thread (poll) serves every connection, so faults land exactly where they are asked to.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace qsync::test {

// How a cut connection ends for both of its sides.
enum class CutStyle {
  kClose,  // an orderly close (FIN): the peer reads end of file
  kReset,  // SO_LINGER 0 then close (RST): the peer reads "Connection reset by peer"
};

class TcpProxy {
 public:
  // Starts listening at once (throws std::runtime_error when no port can be bound).
  explicit TcpProxy(int target_port);
  ~TcpProxy();  // closes every connection and joins the thread
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }

  // Every chunk read from either side is forwarded this long after it arrived (0: at once).
  void set_delay(std::chrono::milliseconds per_chunk);
  // Once `bytes` more bytes (both directions together) have been forwarded, the connection that
  // carried the last of them is cut: exactly `bytes` go through, the rest of that chunk is dropped.
  // Applies once; later connections pass untouched.
  void cut_after_bytes(int64_t bytes, CutStyle style);
  // Cuts every open connection now; returns how many were cut.
  int cut_open_connections(CutStyle style);
  // New connections in the next `duration` are accepted and closed at once, unforwarded.
  void turn_away_for(std::chrono::milliseconds duration);

  int64_t bytes_forwarded() const { return bytes_forwarded_; }  // both directions
  int connections_accepted() const { return accepted_; }        // forwarded ones
  int connections_turned_away() const { return turned_away_; }
  int connections_cut() const { return cut_; }
  int connections_open() const { return open_; }

 private:
  struct Chunk {
    std::vector<char> bytes;
    std::chrono::steady_clock::time_point due;
    bool cut_after = false;  // the chunk that used up a cut_after_bytes budget
    CutStyle style = CutStyle::kClose;
  };
  struct Connection {
    int fd[2] = {-1, -1};          // 0: the client that connected to us, 1: the target
    std::deque<Chunk> queue[2];    // queue[s]: read from side s, to be sent to the other side
    bool ended[2] = {false, false};  // side s closed or failed: flush toward the other, then close
    bool closed = false;
  };
  void serve();
  void accept_one();
  bool pump(Connection& c, int from);  // false: that side ended or failed
  void deliver_due(Connection& c);
  void cut(Connection& c, CutStyle style);
  void close_connection(Connection& c);
  int poll_timeout_ms() const;

  int target_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::list<Connection> connections_;  // the serving thread's own

  mutable std::mutex mutex_;  // guards what the test sets, below
  std::condition_variable applied_;
  std::chrono::milliseconds delay_{0};
  int64_t cut_budget_ = -1;  // -1: no byte cut armed
  CutStyle cut_budget_style_ = CutStyle::kClose;
  bool cut_now_requested_ = false;
  CutStyle cut_now_style_ = CutStyle::kClose;
  int cut_now_count_ = 0;
  std::chrono::steady_clock::time_point turn_away_until_{};
  bool stopping_ = false;

  std::atomic<int64_t> bytes_forwarded_{0};
  std::atomic<int> accepted_{0}, turned_away_{0}, cut_{0}, open_{0};
};

}  // namespace qsync::test
