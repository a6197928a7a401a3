// File: planner/onnx/onnx_graph.cpp
// ModelProto bytes -> onnx::Model (field numbers from onnx/onnx.proto, IR version 3 and later).
// Unknown fields are skipped, as protobuf does; fields of the wrong wire type, truncated
// payloads, external tensor data and tensors whose bytes do not match their dims are refused.
#include "planner/onnx/onnx_graph.h"

#include <cstring>
#include <limits>

#include "planner/onnx/protobuf_wire.h"

namespace qsync::onnx {

const char* data_type_name(int32_t t) {
  switch (DataType(t)) {
    case DataType::UNDEFINED: return "undefined";
    case DataType::FLOAT: return "float";
    case DataType::UINT8: return "uint8";
    case DataType::INT8: return "int8";
    case DataType::INT32: return "int32";
    case DataType::INT64: return "int64";
    case DataType::BOOL: return "bool";
    case DataType::DOUBLE: return "double";
  }
  static thread_local std::string other;
  other = "type " + std::to_string(t);
  return other.c_str();
}

int64_t TensorData::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

const Attribute* Node::attribute(std::string_view n) const {
  for (const Attribute& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}

namespace {

std::string text(const WireReader& r, const WireField& f, const char* name) {
  expect_wire(r, f, WireType::LENGTH_DELIMITED, name);
  return std::string(f.bytes);
}

int64_t integer(const WireReader& r, const WireField& f, const char* name) {
  expect_wire(r, f, WireType::VARINT, name);
  return int64_t(f.varint);
}

// raw_data holds numel little-endian elements of the data type.
void decode_raw(const WireReader& r, const WireField& raw, TensorData& t) {
  const std::string_view b = raw.bytes;
  const int64_t n = t.numel();
  auto need = [&](size_t element_bytes) {
    if (uint64_t(n) * element_bytes != b.size())
      r.fail(raw.payload_offset, "raw_data of tensor '" + t.name + "' has " + std::to_string(b.size()) +
                                     " bytes, its dims and type (" + data_type_name(t.data_type) + ") need " +
                                     std::to_string(uint64_t(n) * element_bytes));
  };
  switch (DataType(t.data_type)) {
    case DataType::FLOAT:
      need(4);
      t.floats.resize(size_t(n));
      if (n > 0) std::memcpy(t.floats.data(), b.data(), b.size());
      return;
    case DataType::DOUBLE: {
      need(8);
      t.floats.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, b.data() + i * 8, 8);
        t.floats[size_t(i)] = float(v);
      }
      return;
    }
    case DataType::INT64:
      need(8);
      t.ints.resize(size_t(n));
      if (n > 0) std::memcpy(t.ints.data(), b.data(), b.size());
      return;
    case DataType::INT32: {
      need(4);
      t.ints.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, b.data() + i * 4, 4);
        t.ints[size_t(i)] = v;
      }
      return;
    }
    case DataType::BOOL:
    case DataType::UINT8:
      need(1);
      t.ints.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) t.ints[size_t(i)] = uint8_t(b[size_t(i)]);
      return;
    case DataType::INT8:
      need(1);
      t.ints.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) t.ints[size_t(i)] = int8_t(b[size_t(i)]);
      return;
    default:
      r.fail(raw.payload_offset, "tensor '" + t.name + "' has data type " + data_type_name(t.data_type) +
                                     ", which the engine does not read (float, double, int64, int32, int8, uint8, bool)");
  }
}

std::shared_ptr<const TensorData> parse_tensor(WireReader r) {
  auto t = std::make_shared<TensorData>();
  WireField raw;
  bool has_raw = false;
  std::vector<int64_t> int_data;
  std::vector<double> double_data;
  bool has_int_data = false;
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1: append_varints(r, f, "dims", t->dims); break;
      case 2: t->data_type = int32_t(integer(r, f, "data_type")); break;
      case 4: append_floats(r, f, "float_data", t->floats); break;
      case 5:
      case 7: append_varints(r, f, f.number == 5 ? "int32_data" : "int64_data", int_data); has_int_data = true; break;
      case 8: t->name = text(r, f, "name"); break;
      case 9: expect_wire(r, f, WireType::LENGTH_DELIMITED, "raw_data"); raw = f; has_raw = true; break;
      case 10: append_doubles(r, f, "double_data", double_data); break;
      case 13: r.fail(f.offset, "tensor '" + t->name + "' keeps its data in an external file, which is not supported; "
                                "export with the weights inside the .onnx file (no external data)");
      case 14:
        if (integer(r, f, "data_location") != 0)
          r.fail(f.offset, "tensor '" + t->name + "' is stored externally; export with the weights inside the file");
        break;
      default: break;
    }
  }
  int64_t n = 1;
  for (int64_t d : t->dims) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d))
      r.fail(r.base(), "tensor '" + t->name + "' has invalid dims");
    n *= d;
  }
  if (has_raw) {
    t->floats.clear();
    decode_raw(r, raw, *t);
  } else if (!double_data.empty()) {
    t->floats.assign(double_data.begin(), double_data.end());
  } else if (has_int_data) {
    t->ints = std::move(int_data);
    if (t->data_type == int32_t(DataType::FLOAT)) r.fail(r.base(), "tensor '" + t->name + "' is float but holds int data");
  }
  const int64_t have = int64_t(t->is_floating() ? t->floats.size() : t->ints.size());
  if (have != n)
    r.fail(r.base(), "tensor '" + t->name + "' (" + data_type_name(t->data_type) + ") holds " + std::to_string(have) +
                  " values, its dims need " + std::to_string(n));
  return t;
}

void parse_shape(WireReader r, ValueInfo& v) {
  v.has_shape = true;
  int64_t index = 0;
  while (!r.done()) {
    const WireField f = r.next();
    if (f.number != 1) continue;
    WireReader dim = sub_reader(r, f, "dim", index++);
    int64_t value = -1;
    while (!dim.done()) {
      const WireField d = dim.next();
      if (d.number == 1) value = integer(dim, d, "dim_value");
    }
    v.dims.push_back(value);
  }
}

ValueInfo parse_value_info(WireReader r) {
  ValueInfo v;
  while (!r.done()) {
    const WireField f = r.next();
    if (f.number == 1) {
      v.name = text(r, f, "name");
    } else if (f.number == 2) {  // TypeProto
      WireReader type = sub_reader(r, f, "type");
      while (!type.done()) {
        const WireField tf = type.next();
        if (tf.number != 1) continue;  // tensor_type only
        WireReader tensor = sub_reader(type, tf, "tensor_type");
        while (!tensor.done()) {
          const WireField g = tensor.next();
          if (g.number == 1) v.elem_type = int32_t(integer(tensor, g, "elem_type"));
          else if (g.number == 2) parse_shape(sub_reader(tensor, g, "shape"), v);
        }
      }
    }
  }
  return v;
}

Attribute parse_attribute(WireReader r) {
  Attribute a;
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1: a.name = text(r, f, "name"); break;
      case 20: a.type = AttributeType(integer(r, f, "type")); break;
      case 2: {
        std::vector<float> one;
        expect_wire(r, f, WireType::FIXED32, "f");
        append_floats(r, f, "f", one);
        a.f = one[0];
        break;
      }
      case 3: a.i = integer(r, f, "i"); break;
      case 4: a.s = text(r, f, "s"); break;
      case 5: a.t = parse_tensor(sub_reader(r, f, "t")); break;
      case 7: append_floats(r, f, "floats", a.floats); break;
      case 8: append_varints(r, f, "ints", a.ints); break;
      case 9: a.strings.push_back(text(r, f, "strings")); break;
      default: break;  // graphs, sparse tensors, type protos: not used by the supported ops
    }
  }
  return a;
}

Node parse_node(WireReader r) {
  Node n;
  int64_t attributes = 0;
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1: n.inputs.push_back(text(r, f, "input")); break;
      case 2: n.outputs.push_back(text(r, f, "output")); break;
      case 3: n.name = text(r, f, "name"); break;
      case 4: n.op_type = text(r, f, "op_type"); break;
      case 7: n.domain = text(r, f, "domain"); break;
      case 5: n.attributes.push_back(parse_attribute(sub_reader(r, f, "attribute", attributes++))); break;
      default: break;
    }
  }
  return n;
}

Graph parse_graph(WireReader r) {
  Graph g;
  int64_t nodes = 0, inits = 0, ins = 0, outs = 0, infos = 0;
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1: g.nodes.push_back(parse_node(sub_reader(r, f, "node", nodes++))); break;
      case 2: g.name = text(r, f, "name"); break;
      case 5: g.initializers.push_back(parse_tensor(sub_reader(r, f, "initializer", inits++))); break;
      case 11: g.inputs.push_back(parse_value_info(sub_reader(r, f, "input", ins++))); break;
      case 12: g.outputs.push_back(parse_value_info(sub_reader(r, f, "output", outs++))); break;
      case 13: g.value_infos.push_back(parse_value_info(sub_reader(r, f, "value_info", infos++))); break;
      case 15: r.fail(f.offset, "sparse initializers are not supported; export dense weights");
      default: break;
    }
  }
  return g;
}

}  // namespace

Model parse_model(std::string_view bytes) {
  if (bytes.empty()) throw OnnxFormatError("ONNX: the input is empty (0 bytes); pass an .onnx file exported by torch.onnx.export");
  Model m;
  WireReader r(bytes, 0, "ModelProto");
  bool has_graph = false;
  while (!r.done()) {
    const WireField f = r.next();
    switch (f.number) {
      case 1: m.ir_version = integer(r, f, "ir_version"); break;
      case 2: m.producer_name = text(r, f, "producer_name"); break;
      case 3: m.producer_version = text(r, f, "producer_version"); break;
      case 7: m.graph = parse_graph(sub_reader(r, f, "graph")); has_graph = true; break;
      case 8: {
        WireReader op = sub_reader(r, f, "opset_import");
        std::string domain;
        int64_t version = 0;
        while (!op.done()) {
          const WireField g = op.next();
          if (g.number == 1) domain = text(op, g, "domain");
          else if (g.number == 2) version = integer(op, g, "version");
        }
        if (domain.empty() || domain == "ai.onnx") m.opset = version;
        break;
      }
      default: break;
    }
  }
  if (!has_graph)
    throw OnnxFormatError("ONNX: ModelProto has no graph (field 7) in " + std::to_string(bytes.size()) +
                          " bytes; the file is truncated or not an ONNX model");
  if (m.opset <= 0)
    throw OnnxFormatError("ONNX: ModelProto has no opset_import for the default domain (field 8); the file is "
                          "truncated or not an ONNX model");
  if (m.ir_version < 3)
    throw OnnxFormatError("ONNX: ModelProto.ir_version is " + std::to_string(m.ir_version) +
                          " (missing or older than 3); the file is not an ONNX model from a current exporter");
  return m;
}

}  // namespace qsync::onnx
