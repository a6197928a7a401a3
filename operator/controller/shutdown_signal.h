// File: operator/controller/shutdown_signal.h
// Graceful shutdown: a stop flag with a condition variable that the manager and its parts wait
// on, raised by request() or, once install_signal_handlers() ran, by SIGTERM or SIGINT (what
// Kubernetes sends a pod before killing it). A second signal exits at once with status 1, as
// controller-runtime's signal handler. The handler only writes to a pipe (async-signal-safe); a
// watcher thread turns that into request().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace qsync::controller {

class ShutdownSignal {
 public:
  ShutdownSignal() = default;
  ~ShutdownSignal();
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Routes SIGTERM and SIGINT of the process to this object. One object per process may do so;
  // a second call throws std::logic_error.
  void install_signal_handlers();

  void request();
  bool requested() const { return requested_.load(); }
  void wait();
  // True when requested within `timeout`.
  bool wait_for(std::chrono::milliseconds timeout);

 private:
  void watch_pipe();

  std::atomic<bool> requested_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread watcher_;
  bool installed_ = false;
};

}  // namespace qsync::controller
