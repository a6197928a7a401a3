// File: tests/kube_api_server/container_termination.h
// How the local kubelet reports a container that ended, as a node's kubelet does: the terminated
// state (exit code, reason, signal, times) and its message, read from the container's
// terminationMessagePath file (up to 4096 bytes), or with FallbackToLogsOnError after a failed
// exit and an empty file, the last 80 lines (at most 2048 bytes) of the container's log.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

// The termination-message file's content, up to 4096 bytes ("" when missing).
std::string termination_message_file(const std::string& path);
// The last lines of what the process wrote to its log from byte `offset` on.
std::string log_tail(const std::string& path, std::uintmax_t offset);
// state.terminated of a container from its waitpid status; `message` is left out when empty.
nlohmann::json terminated_state(const std::string& started_at, int pid, int wstatus, const std::string& message,
                                const std::string& finished);

}  // namespace qsync::kube_test
