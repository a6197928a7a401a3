// File: worker/stop_signal_watcher.h
// SIGINT and SIGTERM as a stop request for the training loop, without a signal handler.
// The constructor blocks both signals in the calling thread before the worker starts any other
// thread (Gloo, the metrics server, the gradient-sync thread, OpenMP), so every thread inherits the
// block, and one watcher thread takes them synchronously with sigtimedwait. No thread is ever
// interrupted by these signals: no syscall in a library thread sees EINTR, no handler runs on a
// thread in the middle of its work. (An asynchronous handler did: a worker stopped with SIGTERM
// while its metrics were scraped rarely crashed with a corrupted heap.)
//
//   StopSignalWatcher stop;          // first thing, before any thread starts
//   stop.set_armed(true);            // the training loop: a signal becomes a stop request
//   ... if (stop.requested()) { checkpoint; break; }
//   stop.set_armed(false);
// While not armed (setup such as a rendezvous waiting for peers, and after the loop), a signal
// has its default action: the process ends at once, as it would without the watcher. The
// destructor ends the watcher thread and restores the calling thread's signal mask.
#pragma once

#include <atomic>
#include <csignal>
#include <thread>

namespace qsync {

class StopSignalWatcher {
 public:
  StopSignalWatcher();
  ~StopSignalWatcher();
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

  void set_armed(bool armed) { armed_.store(armed); }
  // True once SIGINT or SIGTERM has arrived while armed.
  bool requested() const { return requested_.load(); }
  // The signal that arrived (0: none yet).
  int signal_number() const { return signal_.load(); }

 private:
  void watch();

  sigset_t previous_mask_;
  std::atomic<bool> requested_{false};
  std::atomic<int> signal_{0};
  std::atomic<bool> armed_{false};
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

}  // namespace qsync
