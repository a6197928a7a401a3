// File: runner/child_process.h
// Starting a child process of `qsync run`: a worker (local_runner.cpp) or a measurement for the
// planner (local_measurements.cpp). One fork + exec for both: the environment added, stderr (and
// stdout, unless it goes to a pipe) to a log file, the CPUs it is pinned to.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace qsync {

using ChildEnv = std::vector<std::pair<std::string, std::string>>;

// Starts args[0] with `env` set, stderr to the file `log` (truncated), stdout to `stdout_fd`
// (-1: to `log` too), on `cpus` (empty: not pinned); returns its pid. Throws std::runtime_error
// when fork fails; a child that cannot be pinned or run writes why to `log` and exits 127.
pid_t spawn_child(const std::vector<std::string>& args, const ChildEnv& env, const std::string& log, int stdout_fd,
                  const std::vector<int>& cpus);

}  // namespace qsync
