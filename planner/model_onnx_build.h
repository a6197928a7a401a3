// File: planner/model_onnx_build.h
// Internal to planner/model_onnx*.cpp: the state of turning ONNX nodes into graph layers (values
// by name: an activation produced by a layer, or a constant), and the per-op mappers
// (model_onnx_ops.cpp). Not part of the planner's API.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "planner/onnx/onnx_graph.h"

namespace qsync::onnx_build {

struct Value {
  bool constant = false;
  int producer = -1;  // activation: -1 the model input, else the layer index
  Shape shape;        // activation: per sample (batch excluded)
  std::shared_ptr<const onnx::TensorData> data;  // constant
  bool initializer = false;  // a graph initializer (trainable where a node trains it)
  bool unusable = false;     // an output the engine does not produce (BatchNormalization's running stats)
};

struct Builder {
  std::string source;
  const onnx::Graph* graph = nullptr;
  std::map<std::string, Value> values;
  std::map<std::string, int> uses;  // how many node inputs read each value
  std::vector<LayerDesc> layers;
  std::set<std::string> names;
  std::set<std::string> consumed;  // values fused into an earlier layer (a MatMul's bias Add)
  int64_t vocab = 0;

  [[noreturn]] void fail(const onnx::Node& n, const std::string& what) const;
  const Value& value(const onnx::Node& n, size_t input) const;  // throws naming the node when absent
  bool is_constant(const onnx::Node& n, size_t input) const;
  const Value& activation(const onnx::Node& n, size_t input) const;  // throws when constant
  const onnx::TensorData& constant(const onnx::Node& n, size_t input) const;
  // Appends `l` (name, kind, shapes set) and binds the node's first output to it.
  void add_layer(const onnx::Node& n, LayerDesc l);
  std::string layer_name(const onnx::Node& n, bool gemm_like);
};

// Maps one node (op types of onnx_supported_ops()); false when the op is not one of them.
bool map_node(Builder& b, const onnx::Node& n, size_t index);
// The supported op types, sorted.
const std::vector<std::string>& supported_ops();

// Helpers of the mappers (model_onnx_ops.cpp): a layer named after the node; `v` as its next
// input; the shapes of the engine's existing kinds (linear, conv2d, ...) by the YAML rules; a
// per-sample rank check; a full (batch-first) axis as a per-sample one (the batch refused).
LayerDesc leaf(Builder& b, const onnx::Node& n, LayerKind kind, bool gemm_like = false);
void from(LayerDesc& l, const Value& v);
void infer(Builder& b, const onnx::Node& n, LayerDesc& l);
void need_rank(Builder& b, const onnx::Node& n, const Value& v, size_t rank, const char* what);
int64_t sample_axis(Builder& b, const onnx::Node& n, int64_t axis, size_t r);
// Layout ops (model_onnx_layout.cpp).
void map_global_pool(Builder& b, const onnx::Node& n);
void map_flatten(Builder& b, const onnx::Node& n);
void map_reshape(Builder& b, const onnx::Node& n);
void map_transpose(Builder& b, const onnx::Node& n);
void map_concat(Builder& b, const onnx::Node& n);
void map_pad(Builder& b, const onnx::Node& n);
void map_split(Builder& b, const onnx::Node& n);
// Single-input ops of the engine's own kinds (relu, gelu, dropout, softmax, unary), model_onnx_ops.cpp.
void map_simple(Builder& b, const onnx::Node& n, LayerKind kind);
// Fusions (model_onnx_fusion.cpp). bias_add: the Add after MatMul node `index` adding a 1-D bias of
// N values, when it is the MatMul output's only reader (its bias in *bias), else nullptr.
const onnx::Node* bias_add(Builder& b, const onnx::Node& n, size_t index, int64_t N, const onnx::TensorData** bias);
// The exact-erf GELU pattern starting at Div node `index`: maps it as one gelu layer; false when
// the nodes after it are not that pattern.
bool fuse_gelu(Builder& b, const onnx::Node& div, size_t index);

// Window attributes of Conv / MaxPool / AveragePool (model_onnx_ops.cpp): a square kernel (from
// kernel_shape, else the weight's), equal strides and pads, dilation 1; the output size.
struct ConvWindow {
  int64_t kernel = 0, stride = 1, pad = 0;
};
ConvWindow window(Builder& b, const onnx::Node& n, int64_t kernel_from_weight);
int64_t window_out(Builder& b, const onnx::Node& n, int64_t in, const ConvWindow& w);
// Conv (model_onnx_conv.cpp); with `groups` > 1 per group a crop of its input channels (PAD) and
// an engine conv2d of its slice of the weight, then a Concat of the groups' outputs.
void map_conv(Builder& b, const onnx::Node& n);
void map_grouped_conv(Builder& b, const onnx::Node& n, const Value& x, const onnx::TensorData& w,
                      const onnx::TensorData* bias, int64_t groups, const ConvWindow& win);

GraphTensor graph_tensor(const onnx::TensorData& t);
int64_t attr_int(const onnx::Node& n, const char* name, int64_t fallback);
float attr_float(const onnx::Node& n, const char* name, float fallback);
std::vector<int64_t> attr_ints(const onnx::Node& n, const char* name);

}  // namespace qsync::onnx_build
