// File: worker/byte_record.h
// The worker's binary files (training checkpoints, tensor-parallel weights files) as byte
// records: an appending writer, a bounds-checked reader whose truncation error names the file and
// the fix, and the FNV-1a checksum both file formats end with. Little endian, as the host writes.
//
//   ByteWriter w;  w.put(uint32_t(1));  w.put_bytes(data, n);  atomic_write(path, w.out);
//   ByteReader r(bytes, "checkpoint " + path, "delete it or restore a complete copy");
//   const auto version = r.get<uint32_t>();   // throws "checkpoint P is truncated (...); delete it ..."
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace qsync {

inline uint64_t fnv1a_64(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 1099511628211ull;
  return h;
}

struct ByteWriter {
  std::string out;
  template <class T>
  void put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_bytes(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
};

class ByteReader {
 public:
  // `file` names the file in errors ("checkpoint /x/latest.qckpt"); `fix` says what to do.
  ByteReader(const std::string& in, std::string file, std::string fix)
      : in_(in), file_(std::move(file)), fix_(std::move(fix)) {}

  // Throws when fewer than n bytes are left.
  void need(size_t n) const {
    if (n > in_.size() || pos > in_.size() - n)
      throw std::runtime_error(file_ + " is truncated (needs " + std::to_string(pos + n) + " bytes, has " +
                               std::to_string(in_.size()) + "); " + fix_);
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  void get_bytes(void* dst, size_t n) {
    need(n);
    std::memcpy(dst, in_.data() + pos, n);
    pos += n;
  }

  size_t pos = 0;  // the next byte to read

 private:
  const std::string& in_;
  std::string file_, fix_;
};

}  // namespace qsync
