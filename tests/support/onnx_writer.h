// File: tests/support/onnx_writer.h
// A tiny ONNX (protobuf wire format) writer for tests: builds ModelProto bytes from nodes,
// initializers and value infos, so reader and model-builder tests need no PyTorch. Field
// numbers follow onnx/onnx.proto (the same ones planner/onnx/onnx_graph.cpp reads).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace qsync::onnx_writer {

inline void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
inline void tag(std::string& out, uint32_t field, uint32_t wire) { varint(out, (uint64_t(field) << 3) | wire); }
inline void int_field(std::string& out, uint32_t field, int64_t v) {
  tag(out, field, 0);
  varint(out, uint64_t(v));
}
inline void bytes_field(std::string& out, uint32_t field, const std::string& b) {
  tag(out, field, 2);
  varint(out, b.size());
  out += b;
}
inline void float_field(std::string& out, uint32_t field, float f) {
  tag(out, field, 5);
  char b[4];
  std::memcpy(b, &f, 4);
  out.append(b, 4);
}

// TensorProto: FLOAT raw_data (or INT64 / BOOL when ints given with that type).
inline std::string tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
  std::string t;
  for (int64_t d : dims) int_field(t, 1, d);
  int_field(t, 2, 1);
  bytes_field(t, 8, name);
  std::string raw(values.size() * 4, '\0');
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  bytes_field(t, 9, raw);
  return t;
}
inline std::string int_tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v,
                              int32_t type = 7) {
  std::string t;
  for (int64_t d : dims) int_field(t, 1, d);
  int_field(t, 2, type);
  bytes_field(t, 8, name);
  std::string raw;
  for (int64_t x : v) {
    if (type == 7) {
      char b[8];
      std::memcpy(b, &x, 8);
      raw.append(b, 8);
    } else {
      raw.push_back(char(x));  // BOOL / UINT8
    }
  }
  bytes_field(t, 9, raw);
  return t;
}

struct Attr {
  std::string encoded;
};
inline Attr attr_int(const std::string& name, int64_t v) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 2);
  int_field(a.encoded, 3, v);
  return a;
}
inline Attr attr_float(const std::string& name, float v) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 1);
  float_field(a.encoded, 2, v);
  return a;
}
inline Attr attr_ints(const std::string& name, const std::vector<int64_t>& v) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 7);
  std::string packed;
  for (int64_t x : v) varint(packed, uint64_t(x));
  bytes_field(a.encoded, 8, packed);
  return a;
}
inline Attr attr_floats(const std::string& name, const std::vector<float>& v) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 6);
  std::string packed(v.size() * 4, '\0');
  if (!v.empty()) std::memcpy(packed.data(), v.data(), packed.size());
  bytes_field(a.encoded, 7, packed);
  return a;
}
inline Attr attr_string(const std::string& name, const std::string& v) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 3);
  bytes_field(a.encoded, 4, v);
  return a;
}
inline Attr attr_tensor(const std::string& name, const std::string& tensor_proto) {
  Attr a;
  bytes_field(a.encoded, 1, name);
  int_field(a.encoded, 20, 4);
  bytes_field(a.encoded, 5, tensor_proto);
  return a;
}

inline std::string node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::vector<Attr>& attrs = {}) {
  std::string n;
  for (const auto& i : inputs) bytes_field(n, 1, i);
  for (const auto& o : outputs) bytes_field(n, 2, o);
  bytes_field(n, 3, name);
  bytes_field(n, 4, op);
  for (const auto& a : attrs) bytes_field(n, 5, a.encoded);
  return n;
}

// ValueInfoProto with a tensor type; dim -1 is written as a symbolic "batch".
inline std::string value_info(const std::string& name, int32_t elem_type, const std::vector<int64_t>& dims) {
  std::string shape;
  for (int64_t d : dims) {
    std::string dim;
    if (d < 0) bytes_field(dim, 2, "batch");
    else int_field(dim, 1, d);
    bytes_field(shape, 1, dim);
  }
  std::string tensor_type;
  int_field(tensor_type, 1, elem_type);
  bytes_field(tensor_type, 2, shape);
  std::string type;
  bytes_field(type, 1, tensor_type);
  std::string v;
  bytes_field(v, 1, name);
  bytes_field(v, 2, type);
  return v;
}

struct GraphSpec {
  std::vector<std::string> nodes, initializers, inputs, outputs;
};

inline std::string model(const GraphSpec& g, int64_t opset = 17) {
  std::string graph;
  for (const auto& n : g.nodes) bytes_field(graph, 1, n);
  bytes_field(graph, 2, "test");
  for (const auto& t : g.initializers) bytes_field(graph, 5, t);
  for (const auto& i : g.inputs) bytes_field(graph, 11, i);
  for (const auto& o : g.outputs) bytes_field(graph, 12, o);
  std::string m;
  int_field(m, 1, 8);
  bytes_field(m, 2, "qsync-test");
  bytes_field(m, 7, graph);
  std::string op;
  bytes_field(op, 1, "");
  int_field(op, 2, opset);
  bytes_field(m, 8, op);
  return m;
}

}  // namespace qsync::onnx_writer
