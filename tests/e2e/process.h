// File: tests/e2e/process.h
// Process helpers for end-to-end tests that run the real binaries (qsync-worker, qsync): spawn
// with fork+exec (argv, extra environment, stdout/stderr to files, optionally a new process
// group), wait with a time limit, signal, and read the --log-json progress a worker wrote. Every
// child gets alarm(120) (SpawnOptions::alarm_seconds) before exec (SIGALRM survives exec), so a hung child cannot outlive a
// broken test by much; a Process still running at destruction is SIGKILLed and reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qsync::test {

// A free TCP port on 127.0.0.1 (bind port 0, read it back, close), never one this process has
// handed out before.
int free_tcp_port();

// A fresh directory under the system temp dir named after the running test, removed at scope
// exit (kept when the test failed and QSYNC_KEEP_TEST_DIRS is set).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

std::string read_text(const std::string& path);  // "" when missing

struct SpawnOptions {
  std::vector<std::string> args;  // args[0]: the binary's path
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) ours
  std::string stdout_path, stderr_path;                  // truncated; empty: /dev/null
  bool new_process_group = false;                        // setpgid(0, 0) in the child
  unsigned alarm_seconds = 120;                          // SIGALRM after this long (0: none)
};

class Process {
 public:
  explicit Process(const SpawnOptions& options);
  Process(Process&& other) noexcept;
  Process& operator=(Process&&) = delete;
  Process(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  const SpawnOptions& options() const { return options_; }
  // Whether it has not exited yet (reaps it when it has).
  bool running();
  // Its exit code (128 + signal when killed) once it exits within `timeout`; nullopt otherwise.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  void signal(int sig) const;        // to the process
  void signal_group(int sig) const;  // to its process group (new_process_group only)
  std::string out() const { return read_text(options_.stdout_path); }
  std::string err() const { return read_text(options_.stderr_path); }

 private:
  SpawnOptions options_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Polls `condition` every 5 ms until it holds (true) or `timeout` passes (false).
bool poll_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// The highest "step" of the {"event":"step"} lines of a --log-json stdout file (0: none yet).
int64_t last_logged_step(const std::string& stdout_path);

// The environment of rank `rank` of a `world`-rank job rendezvousing on 127.0.0.1:port.
std::vector<std::pair<std::string, std::string>> rank_env(int rank, int world, int port);

}  // namespace qsync::test
