// File: worker/dist/kv_protocol.h
// The key-value store's wire format, shared by the server and the client (internal to worker/dist).
// After connecting, the client sends kMagic and the server echoes it. Then each request is
//   u8 op, fields...        and each response   u8 status, fields...
// where integers are little-endian (u32 lengths, i64 values) and strings/bytes are u32 length +
// data. Requests: kSet key value | kGet key timeout_ms | kWait n keys... timeout_ms |
// kAdd key delta | kCheck key. Responses: kOk [value | new counter | u8 exists], kTimeout or
// kStopped [u32 n, missing keys...], kBadRequest message.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qsync::kv {

inline constexpr char kMagic[8] = {'Q', 'S', 'Y', 'N', 'C', 'K', 'V', '1'};
inline constexpr uint32_t kMaxKeyBytes = 64 * 1024;
inline constexpr uint32_t kMaxValueBytes = 256u * 1024 * 1024;
inline constexpr uint32_t kMaxKeysPerWait = 1u << 20;

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kStopped = 2, kBadRequest = 3 };

// Builds a message in memory.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& bytes(const char* data, size_t size);
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  Writer& bytes(const std::vector<char>& v) { return bytes(v.data(), v.size()); }
  const std::vector<char>& data() const { return data_; }

 private:
  std::vector<char> data_;
};

uint32_t decode_u32(const unsigned char* p);
int64_t decode_i64(const unsigned char* p);

enum class IoResult { kOk, kClosed, kTimedOut, kFailed };

// Sends all bytes (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE).
IoResult send_all(int fd, const void* data, size_t size);
// Receives exactly `size` bytes; without a deadline it blocks until they arrive or the peer closes.
IoResult recv_all(int fd, void* data, size_t size,
                  std::optional<std::chrono::steady_clock::time_point> deadline);

// Reads framed fields from a socket; any failure leaves ok() false.
class SocketReader {
 public:
  SocketReader(int fd, std::optional<std::chrono::steady_clock::time_point> deadline)
      : fd_(fd), deadline_(deadline) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  // A u32 length and that many bytes; lengths above `limit` fail. Memory grows with the bytes
  // that arrive (1 MiB at a time), not with the length claimed.
  std::vector<char> bytes(uint32_t limit);
  std::string str(uint32_t limit);
  bool ok() const { return result_ == IoResult::kOk; }
  IoResult result() const { return result_; }

 private:
  void read(void* data, size_t size);
  int fd_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  IoResult result_ = IoResult::kOk;
};

}  // namespace qsync::kv
