// File: tests/e2e/process.cpp
// fork+exec, waiting and signalling for the end-to-end tests (see process.h).
#include "tests/e2e/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace qsync::test {

namespace fs = std::filesystem;

namespace {

// One loopback port the kernel picks for port 0 (bound, read back, closed).
int kernel_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw std::runtime_error(std::string("cannot bind a loopback port: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

// A port handed out is not bound until its user starts, so the kernel may pick it again for the
// next request: the operator's metrics port once came back equal to the job's MASTER_PORT, and
// rank 0 could not listen. Ports already handed out by this process are skipped.
int free_tcp_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  std::lock_guard<std::mutex> lock(mutex);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int port = kernel_free_port();
    if (handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("free_tcp_port: the kernel kept returning ports this test already handed out (" +
                           std::to_string(handed_out.size()) + " so far); free some loopback ports");
}

TempDir::TempDir() {
  static int count = 0;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "no_test";
  path_ = fs::temp_directory_path() /
          ("qsync_e2e_" + std::to_string(getpid()) + "_" + name + "_" + std::to_string(count++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (std::getenv("QSYNC_KEEP_TEST_DIRS") != nullptr && info != nullptr && info->result()->Failed()) {
    std::fprintf(stderr, "kept %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(file(name)) << text;
  return file(name);
}

std::string read_text(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Process::Process(const SpawnOptions& options) : options_(options) {
  if (options_.args.empty()) throw std::invalid_argument("Process: no binary given");
  // Everything the child needs is built before fork (only async-signal-safe calls after it).
  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options_.env) env_map[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env_map) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (std::string& a : options_.args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* out = options_.stdout_path.empty() ? "/dev/null" : options_.stdout_path.c_str();
  const char* err = options_.stderr_path.empty() ? "/dev/null" : options_.stderr_path.c_str();

  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    if (options_.new_process_group) setpgid(0, 0);
    const int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || dup2(o, STDOUT_FILENO) < 0 || dup2(e, STDERR_FILENO) < 0) _exit(126);
    // The test may have SIGINT/SIGTERM ignored or blocked: the child starts with the defaults.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    alarm(options_.alarm_seconds);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
}

Process::Process(Process&& other) noexcept
    : options_(std::move(other.options_)), pid_(other.pid_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

bool Process::running() {
  if (exit_code_ || pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return r == 0;
}

std::optional<int> Process::wait_for(std::chrono::milliseconds timeout) {
  poll_until([this] { return !running(); }, timeout);
  return exit_code_;
}

void Process::signal(int sig) const {
  if (pid_ > 0 && !exit_code_) kill(pid_, sig);
}

void Process::signal_group(int sig) const {
  if (pid_ > 0 && options_.new_process_group) kill(-pid_, sig);
}

bool poll_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int64_t last_logged_step(const std::string& stdout_path) {
  std::ifstream in(stdout_path);
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);  // a partial last line: discarded
    if (e.is_object() && e.value("event", "") == "step") step = std::max<int64_t>(step, e.value("step", int64_t(0)));
  }
  return step;
}

std::vector<std::pair<std::string, std::string>> rank_env(int rank, int world, int port) {
  return {{"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)}};
}

}  // namespace qsync::test
