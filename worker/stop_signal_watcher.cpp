// File: worker/stop_signal_watcher.cpp
// StopSignalWatcher: SIGINT/SIGTERM blocked in every thread, taken by one thread with sigtimedwait.
#include "worker/stop_signal_watcher.h"

#include <pthread.h>

#include <cerrno>
#include <ctime>

namespace qsync {
namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

StopSignalWatcher::StopSignalWatcher() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  watcher_ = std::thread([this] { watch(); });
}

StopSignalWatcher::~StopSignalWatcher() {
  done_.store(true);
  watcher_.join();
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

void StopSignalWatcher::watch() {
  const sigset_t set = stop_signals();
  // Wakes every 50 ms to notice the destructor; a signal is taken as soon as it arrives.
  const timespec tick{0, 50 * 1000 * 1000};
  while (!done_.load()) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig != SIGINT && sig != SIGTERM) continue;
    if (!armed_.load()) {
      // The default action (end the process), delivered to this thread alone.
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
      continue;  // only reached when the default action was changed to ignore
    }
    signal_.store(sig);
    requested_.store(true);
  }
}

}  // namespace qsync
