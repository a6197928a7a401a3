// File: tests/kube_api_server/container_termination.cpp
// The terminated state and message of a container of the local kubelet (container_termination.h).
#include "tests/kube_api_server/container_termination.h"

#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace qsync::kube_test {
namespace {

namespace fs = std::filesystem;

// Kubernetes' limits: the message file is read up to 4096 bytes; the log fallback is its last 80
// lines, at most 2048 bytes.
constexpr size_t kMessageFileBytes = 4096, kLogTailBytes = 2048, kLogTailLines = 80;

std::string read_range(const std::string& path, std::uintmax_t from, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(std::streamoff(from));
  std::string bytes(max_bytes, '\0');
  in.read(bytes.data(), std::streamsize(max_bytes));
  bytes.resize(size_t(in.gcount()));
  return bytes;
}

}  // namespace

std::string termination_message_file(const std::string& path) { return read_range(path, 0, kMessageFileBytes); }

std::string log_tail(const std::string& path, std::uintmax_t offset) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size <= offset) return "";
  const std::uintmax_t from = std::max(offset, size - std::min<std::uintmax_t>(size, kLogTailBytes));
  std::string tail = read_range(path, from, kLogTailBytes);
  size_t lines = 0;
  for (size_t at = tail.size(); at > 0; --at) {
    if (tail[at - 1] == '\n' && at < tail.size() && ++lines >= kLogTailLines) return tail.substr(at);
  }
  return tail;
}

nlohmann::json terminated_state(const std::string& started_at, int pid, int wstatus, const std::string& message,
                                const std::string& finished) {
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + (WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
  nlohmann::json terminated = {{"exitCode", code},
                               {"reason", code == 0 ? "Completed" : "Error"},
                               {"startedAt", started_at},
                               {"finishedAt", finished},
                               {"containerID", "local://" + std::to_string(pid)}};
  if (WIFSIGNALED(wstatus)) terminated["signal"] = WTERMSIG(wstatus);
  if (!message.empty()) terminated["message"] = message;
  return terminated;
}

}  // namespace qsync::kube_test
