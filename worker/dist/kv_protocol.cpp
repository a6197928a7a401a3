// File: worker/dist/kv_protocol.cpp
// Encoding and socket I/O for the key-value store's wire format (see kv_protocol.h).
#include "worker/dist/kv_protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace qsync::kv {

Writer& Writer::u8(uint8_t v) {
  data_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) data_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) data_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::bytes(const char* data, size_t size) {
  u32(static_cast<uint32_t>(size));
  data_.insert(data_.end(), data, data + size);
  return *this;
}

uint32_t decode_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

int64_t decode_i64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<int64_t>(v);
}

IoResult send_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return (errno == EPIPE || errno == ECONNRESET) ? IoResult::kClosed : IoResult::kFailed;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return IoResult::kOk;
}

IoResult recv_all(int fd, void* data, size_t size,
                  std::optional<std::chrono::steady_clock::time_point> deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return IoResult::kTimedOut;
      pollfd pfd{fd, POLLIN, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return IoResult::kFailed;
      if (r == 0) return IoResult::kTimedOut;
    }
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n == 0) return IoResult::kClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ECONNRESET ? IoResult::kClosed : IoResult::kFailed;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return IoResult::kOk;
}

void SocketReader::read(void* data, size_t size) {
  if (result_ != IoResult::kOk) return;
  result_ = recv_all(fd_, data, size, deadline_);
}

uint8_t SocketReader::u8() {
  unsigned char b = 0;
  read(&b, 1);
  return ok() ? b : 0;
}

uint32_t SocketReader::u32() {
  unsigned char b[4] = {};
  read(b, 4);
  return ok() ? decode_u32(b) : 0;
}

int64_t SocketReader::i64() {
  unsigned char b[8] = {};
  read(b, 8);
  return ok() ? decode_i64(b) : 0;
}

std::vector<char> SocketReader::bytes(uint32_t limit) {
  const uint32_t size = u32();
  if (!ok()) return {};
  if (size > limit) {
    result_ = IoResult::kFailed;
    return {};
  }
  // Grows with what arrives, a chunk at a time: a peer that claims a large length and sends less
  // costs what it sent, not the claim (the whole claim zeroed up front was 256 MiB a connection).
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<char> out;
  while (ok() && out.size() < size) {
    const size_t have = out.size(), take = std::min<size_t>(kChunk, size - have);
    out.resize(have + take);
    read(out.data() + have, take);
  }
  if (!ok()) return {};
  return out;
}

std::string SocketReader::str(uint32_t limit) {
  const std::vector<char> b = bytes(limit);
  return std::string(b.begin(), b.end());
}

}  // namespace qsync::kv
