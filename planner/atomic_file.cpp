// File: planner/atomic_file.cpp
// Atomic whole-file writes (temp file beside the target, write, fsync, rename, fsync of the
// directory), atomic second names (a hard link renamed into place) and whole-file reads, with
// errors that name the path, the step and strerror.
#include "planner/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace qsync {
namespace {

[[noreturn]] void io_fail(const std::string& path, const std::string& step, int err) {
  throw std::runtime_error("cannot write '" + path + "': " + step + ": " + std::strerror(err));
}

// Closes a descriptor once; close errors after a successful fsync are reported by the caller.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Returns 0 or the errno of close().
  int release_and_close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// "<dir>/.<file>.tmp-<pid>-<n>": hidden, in the same directory (so rename is atomic), unique per
// process and call; O_EXCL retries on the unlikely clash with a leftover of a crashed writer.
std::string temp_name_for(const std::string& path, int attempt) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path);
  std::string name = ".";  // appended piecewise: GCC 12 -Wrestrict misfires on "." + std::string&&
  name += p.filename().string();
  name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" +
          std::to_string(attempt);
  return (p.parent_path() / name).string();
}

void write_all(int fd, std::string_view bytes, const std::string& path, const std::string& temp) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail(path, "writing temp file '" + temp + "'", errno);
    }
    done += size_t(n);
  }
}

void fsync_directory(const std::string& path) {
  std::string dir = directory_of(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_fail(path, "opening directory '" + dir + "' to fsync it", errno);
  FileDescriptor guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL) io_fail(path, "fsync of directory '" + dir + "'", errno);
}

// link(2)'s answers for a filesystem (or a file) that cannot have a second name.
bool no_hard_links(int err) {
#if defined(EOPNOTSUPP) && EOPNOTSUPP != ENOTSUP
  if (err == EOPNOTSUPP) return true;
#endif
  return err == EPERM || err == EXDEV || err == EMLINK || err == ENOTSUP;
}

}  // namespace

void atomic_file_write(const std::string& path, std::string_view bytes) {
  if (path.empty()) throw std::runtime_error("cannot write a file with an empty path; pass a file path");
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = temp_name_for(path, attempt);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100))
      io_fail(path, "creating temp file '" + temp + "' (is the directory there and writable?)", errno);
  }
  FileDescriptor file(fd);
  try {
    write_all(fd, bytes, path, temp);
    if (::fsync(fd) != 0) io_fail(path, "fsync of temp file '" + temp + "'", errno);
    if (int err = file.release_and_close(); err != 0) io_fail(path, "closing temp file '" + temp + "'", err);
    if (::rename(temp.c_str(), path.c_str()) != 0)
      io_fail(path, "renaming temp file '" + temp + "' onto it", errno);
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_directory(path);
}

bool atomic_file_link(const std::string& existing, const std::string& path) {
  std::string temp;
  for (int attempt = 0;; ++attempt) {
    temp = temp_name_for(path, attempt);
    if (::link(existing.c_str(), temp.c_str()) == 0) break;
    const int err = errno;
    if (no_hard_links(err)) return false;
    if (err != EEXIST || attempt >= 100)
      io_fail(path, "linking temp name '" + temp + "' to '" + existing + "'", err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    io_fail(path, "renaming temp link '" + temp + "' onto it", err);
  }
  fsync_directory(path);
  return true;
}

std::string file_read_all(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  FileDescriptor file(fd);
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buffer, size_t(n));
  }
  return out;
}

}  // namespace qsync
