// File: planner/onnx/protobuf_wire.h
// The protobuf wire format, read-only: varints, fixed32/64 and length-delimited fields over a
// byte range, with every read bounds-checked. A WireReader knows the absolute offset of its
// range in the whole input and the field path it is decoding, so errors say where
// ("byte 1234, GraphProto.node[7].attribute[0]: truncated varint").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qsync::onnx {

enum class WireType : uint8_t { VARINT = 0, FIXED64 = 1, LENGTH_DELIMITED = 2, FIXED32 = 5 };

struct WireField {
  uint32_t number = 0;
  WireType type = WireType::VARINT;
  uint64_t varint = 0;        // VARINT, FIXED64, FIXED32 (the raw bits)
  std::string_view bytes;     // LENGTH_DELIMITED
  size_t offset = 0;          // absolute offset of the field's tag
  size_t payload_offset = 0;  // absolute offset of its payload
};

class WireReader {
 public:
  // `data`: the range to read; `base`: its absolute offset in the input; `path`: the message
  // being decoded, for errors.
  WireReader(std::string_view data, size_t base, std::string path);
  bool done() const { return pos_ >= data_.size(); }
  // Reads the next field (tag and payload). Groups and unknown wire types are refused.
  WireField next();
  const std::string& path() const { return path_; }
  size_t base() const { return base_; }
  [[noreturn]] void fail(size_t absolute_offset, const std::string& what) const;

 private:
  uint64_t read_varint(const char* what);
  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
  std::string path_;
};

// A sub-message's reader: the field's bytes, with `path` + "." + name (+ "[index]").
WireReader sub_reader(const WireReader& parent, const WireField& f, const std::string& name, int64_t index = -1);
// Checks the field has the wire type the schema gives `name`, else fails naming both.
void expect_wire(const WireReader& r, const WireField& f, WireType t, const char* name);

// Appends a repeated scalar field's values: packed (LENGTH_DELIMITED) or one unpacked value.
void append_varints(const WireReader& r, const WireField& f, const char* name, std::vector<int64_t>& out);
void append_floats(const WireReader& r, const WireField& f, const char* name, std::vector<float>& out);
void append_doubles(const WireReader& r, const WireField& f, const char* name, std::vector<double>& out);

}  // namespace qsync::onnx
