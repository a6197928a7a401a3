// File: runner/child_process.cpp
// fork + exec of `qsync run`'s children (see child_process.h).
#include "runner/child_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "runner/cpu_pinning.h"

namespace qsync {

pid_t spawn_child(const std::vector<std::string>& args, const ChildEnv& env, const std::string& log, int stdout_fd,
                  const std::vector<int>& cpus) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);  // dup2's copies stay open
  if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
  else if (log_fd >= 0) dup2(log_fd, STDOUT_FILENO);
  if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  try {
    pin_to_cpus(cpus);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    _exit(127);
  }
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

}  // namespace qsync
