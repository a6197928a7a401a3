// File: planner/onnx/protobuf_wire.cpp
// Bounds-checked protobuf wire decoding (see protobuf_wire.h).
#include "planner/onnx/protobuf_wire.h"

#include <cstring>

#include "planner/onnx/onnx_graph.h"

namespace qsync::onnx {

WireReader::WireReader(std::string_view data, size_t base, std::string path)
    : data_(data), base_(base), path_(std::move(path)) {}

void WireReader::fail(size_t absolute_offset, const std::string& what) const {
  throw OnnxFormatError("ONNX: byte " + std::to_string(absolute_offset) + ", " + path_ + ": " + what +
                        "; the file is truncated or not an ONNX model (re-export it, e.g. with tools/export_onnx.py)");
}

uint64_t WireReader::read_varint(const char* what) {
  const size_t start = pos_;
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) fail(base_ + start, std::string("truncated varint (") + what + ")");
    const uint8_t b = uint8_t(data_[pos_++]);
    v |= uint64_t(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail(base_ + start, std::string("varint longer than 10 bytes (") + what + ")");
}

WireField WireReader::next() {
  WireField f;
  f.offset = base_ + pos_;
  const uint64_t tag = read_varint("field tag");
  f.number = uint32_t(tag >> 3);
  if (f.number == 0 || (tag >> 3) > 0x1fffffff) fail(f.offset, "invalid field number " + std::to_string(tag >> 3));
  const uint32_t wt = uint32_t(tag & 7);
  f.payload_offset = base_ + pos_;
  switch (wt) {
    case 0: f.type = WireType::VARINT; f.varint = read_varint("field value"); break;
    case 1:
    case 5: {
      const size_t n = wt == 1 ? 8 : 4;
      if (data_.size() - pos_ < n)
        fail(f.offset, "field " + std::to_string(f.number) + " needs " + std::to_string(n) + " bytes, " +
                           std::to_string(data_.size() - pos_) + " left");
      uint64_t bits = 0;
      std::memcpy(&bits, data_.data() + pos_, n);  // little-endian host (x86-64)
      pos_ += n;
      f.type = wt == 1 ? WireType::FIXED64 : WireType::FIXED32;
      f.varint = bits;
      break;
    }
    case 2: {
      const uint64_t len = read_varint("field length");
      f.payload_offset = base_ + pos_;
      if (len > data_.size() - pos_)
        fail(f.offset, "field " + std::to_string(f.number) + " says " + std::to_string(len) + " bytes, only " +
                           std::to_string(data_.size() - pos_) + " left");
      f.type = WireType::LENGTH_DELIMITED;
      f.bytes = data_.substr(pos_, size_t(len));
      pos_ += size_t(len);
      break;
    }
    default:
      fail(f.offset, "field " + std::to_string(f.number) + " has wire type " + std::to_string(wt) +
                         " (groups and unknown types are not protobuf 3)");
  }
  return f;
}

WireReader sub_reader(const WireReader& parent, const WireField& f, const std::string& name, int64_t index) {
  expect_wire(parent, f, WireType::LENGTH_DELIMITED, name.c_str());
  std::string path = parent.path();
  path.append(".").append(name);
  if (index >= 0) path.append("[").append(std::to_string(index)).append("]");
  return WireReader(f.bytes, f.payload_offset, std::move(path));
}

namespace {
const char* wire_name(WireType t) {
  switch (t) {
    case WireType::VARINT: return "varint";
    case WireType::FIXED64: return "fixed64";
    case WireType::LENGTH_DELIMITED: return "length-delimited";
    case WireType::FIXED32: return "fixed32";
  }
  return "?";
}
}  // namespace

void expect_wire(const WireReader& r, const WireField& f, WireType t, const char* name) {
  if (f.type != t)
    r.fail(f.offset, std::string("field ") + name + " (" + std::to_string(f.number) + ") should be " + wire_name(t) +
                         ", is " + wire_name(f.type));
}

void append_varints(const WireReader& r, const WireField& f, const char* name, std::vector<int64_t>& out) {
  if (f.type == WireType::VARINT) {
    out.push_back(int64_t(f.varint));
    return;
  }
  expect_wire(r, f, WireType::LENGTH_DELIMITED, name);
  WireReader packed(f.bytes, f.payload_offset, r.path() + "." + name);
  // A packed run is varints back to back: read them as VARINT fields of a synthetic tag-less
  // stream by decoding directly.
  size_t pos = 0;
  while (pos < f.bytes.size()) {
    uint64_t v = 0;
    int shift = 0;
    const size_t start = pos;
    while (true) {
      if (pos >= f.bytes.size()) packed.fail(f.payload_offset + start, "truncated packed varint");
      if (shift >= 64) packed.fail(f.payload_offset + start, "packed varint longer than 10 bytes");
      const uint8_t b = uint8_t(f.bytes[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) == 0) break;
    }
    out.push_back(int64_t(v));
  }
}

void append_floats(const WireReader& r, const WireField& f, const char* name, std::vector<float>& out) {
  if (f.type == WireType::FIXED32) {
    float v;
    const uint32_t bits = uint32_t(f.varint);
    std::memcpy(&v, &bits, 4);
    out.push_back(v);
    return;
  }
  expect_wire(r, f, WireType::LENGTH_DELIMITED, name);
  if (f.bytes.size() % 4 != 0)
    r.fail(f.payload_offset, std::string("packed ") + name + " has " + std::to_string(f.bytes.size()) +
                                 " bytes, not a multiple of 4");
  const size_t n = f.bytes.size() / 4;
  const size_t at = out.size();
  out.resize(at + n);
  if (n > 0) std::memcpy(out.data() + at, f.bytes.data(), n * 4);  // an empty packed field: no copy from null
}

void append_doubles(const WireReader& r, const WireField& f, const char* name, std::vector<double>& out) {
  if (f.type == WireType::FIXED64) {
    double v;
    std::memcpy(&v, &f.varint, 8);
    out.push_back(v);
    return;
  }
  expect_wire(r, f, WireType::LENGTH_DELIMITED, name);
  if (f.bytes.size() % 8 != 0)
    r.fail(f.payload_offset, std::string("packed ") + name + " has " + std::to_string(f.bytes.size()) +
                                 " bytes, not a multiple of 8");
  const size_t n = f.bytes.size() / 8;
  const size_t at = out.size();
  out.resize(at + n);
  if (n > 0) std::memcpy(out.data() + at, f.bytes.data(), n * 8);
}

}  // namespace qsync::onnx
