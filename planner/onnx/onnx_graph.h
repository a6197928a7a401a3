// File: planner/onnx/onnx_graph.h
// An ONNX model as plain structs, read from its bytes: the subset of onnx.proto the engine
// trains (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto).
// The reader is a pure function of the bytes (no files, no globals), so it can be fuzzed; it
// decodes the protobuf wire format itself (planner/onnx/protobuf_wire.h), without libprotobuf.
// Malformed or truncated input throws OnnxFormatError naming the byte offset and the field path
// ("GraphProto.initializer[3].raw_data"). What the graph means is checked later
// (planner/onnx/onnx_model_desc.h): this layer only decodes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace qsync::onnx {

class OnnxFormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// TensorProto.DataType values the reader decodes (others are kept as their number and refused
// where a value is needed).
enum class DataType : int32_t {
  UNDEFINED = 0, FLOAT = 1, UINT8 = 2, INT8 = 3, INT32 = 6, INT64 = 7, BOOL = 9, DOUBLE = 11,
};
const char* data_type_name(int32_t t);  // "float", "int64", ... or "type 10"

// An initializer or a Constant's value. Floating types decode to `floats`, integer and bool
// types to `ints` (one of the two is filled, numel() entries).
struct TensorData {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = 0;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  int64_t numel() const;
  bool is_floating() const { return data_type == int32_t(DataType::FLOAT) || data_type == int32_t(DataType::DOUBLE); }
};

// AttributeProto.AttributeType
enum class AttributeType : int32_t {
  UNDEFINED = 0, FLOAT = 1, INT = 2, STRING = 3, TENSOR = 4, GRAPH = 5, FLOATS = 6, INTS = 7, STRINGS = 8,
};

struct Attribute {
  std::string name;
  AttributeType type = AttributeType::UNDEFINED;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const TensorData> t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string name, op_type, domain;
  std::vector<std::string> inputs, outputs;  // "" marks an omitted optional input
  std::vector<Attribute> attributes;
  const Attribute* attribute(std::string_view name) const;  // nullptr when absent
};

// A graph input or output: element type and dims (-1 where symbolic, e.g. the batch).
struct ValueInfo {
  std::string name;
  int32_t elem_type = 0;
  std::vector<int64_t> dims;
  bool has_shape = false;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<std::shared_ptr<const TensorData>> initializers;
  std::vector<ValueInfo> inputs, outputs, value_infos;
};

struct Model {
  int64_t ir_version = 0;
  int64_t opset = 0;  // the default ("" or "ai.onnx") domain's opset version
  std::string producer_name, producer_version;
  Graph graph;
};

// Decodes a serialized ModelProto. Throws OnnxFormatError (offset, field path, what is wrong).
Model parse_model(std::string_view bytes);

}  // namespace qsync::onnx
