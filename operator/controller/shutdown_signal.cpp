// File: operator/controller/shutdown_signal.cpp
// SIGTERM/SIGINT -> self-pipe -> watcher thread -> ShutdownSignal::request().
#include "operator/controller/shutdown_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace qsync::controller {

namespace {

int signal_pipe[2] = {-1, -1};
std::atomic<int> signals_seen{0};
std::atomic<bool> handlers_installed{false};

constexpr char kStopByte = 's';
constexpr char kCloseByte = 'c';

void on_signal(int) {
  if (signals_seen.fetch_add(1) > 0) _exit(1);  // a second signal: exit at once
  const int saved_errno = errno;
  const char byte = kStopByte;
  [[maybe_unused]] ssize_t written = write(signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

}  // namespace

ShutdownSignal::~ShutdownSignal() {
  if (installed_) {
    struct sigaction restore {};
    restore.sa_handler = SIG_DFL;
    sigemptyset(&restore.sa_mask);
    sigaction(SIGTERM, &restore, nullptr);
    sigaction(SIGINT, &restore, nullptr);
    const char byte = kCloseByte;
    [[maybe_unused]] ssize_t written = write(signal_pipe[1], &byte, 1);
    if (watcher_.joinable()) watcher_.join();
    close(signal_pipe[0]);
    close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
    signals_seen = 0;
    handlers_installed = false;
  }
}

void ShutdownSignal::install_signal_handlers() {
  if (handlers_installed.exchange(true)) {
    throw std::logic_error("SIGTERM/SIGINT handlers are already installed for another ShutdownSignal");
  }
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) {
    handlers_installed = false;
    throw std::runtime_error(std::string("cannot create the signal pipe: ") + std::strerror(errno));
  }
  installed_ = true;
  watcher_ = std::thread([this] { watch_pipe(); });
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

void ShutdownSignal::watch_pipe() {
  for (;;) {
    char byte = 0;
    const ssize_t n = read(signal_pipe[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == kCloseByte) return;
    request();
  }
}

void ShutdownSignal::request() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
  }
  cv_.notify_all();
}

void ShutdownSignal::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return requested_.load(); });
}

bool ShutdownSignal::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return requested_.load(); });
}

}  // namespace qsync::controller
