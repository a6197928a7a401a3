// File: planner/model_onnx_ops.cpp
// One ONNX node -> one graph layer (or none when fused): attributes checked against what the
// engine's layers compute, per-sample shapes inferred, initializers bound as initial weights or
// constants. Anything outside the supported attributes is refused naming the node and the fix.
#include <algorithm>
#include <cmath>

#include "planner/model_layers.h"
#include "planner/model_onnx_build.h"

namespace qsync::onnx_build {

LayerDesc leaf(Builder& b, const onnx::Node& n, LayerKind kind, bool gemm_like) {
  LayerDesc l;
  l.name = b.layer_name(n, gemm_like);
  l.kind = kind;
  l.op = n.op_type;
  return l;
}

void from(LayerDesc& l, const Value& v) {
  l.graph_inputs.push_back(v.producer);
  l.input_shapes.push_back(v.shape);
  if (l.input_shapes.size() == 1) l.in_shape = v.shape;
}

// Shapes of the engine's existing kinds (linear, conv2d, relu, ...) from the YAML model's rules.
void infer(Builder& b, const onnx::Node& n, LayerDesc& l) {
  const std::vector<int> inputs = l.graph_inputs;
  const std::vector<Shape> shapes = l.input_shapes;
  try {
    model_layers::infer_shapes(l, l.in_shape, false, 0);
  } catch (const model_layers::ShapeError& e) {
    b.fail(n, e.what());
  }
  l.graph_inputs = inputs;
  l.input_shapes = shapes;
}

void need_rank(Builder& b, const onnx::Node& n, const Value& v, size_t rank, const char* what) {
  if (v.shape.size() != rank)
    b.fail(n, std::string("needs a ") + what + " input per sample, got " + shape_string(v.shape));
}

// axis of a full (batch-first) tensor of per-sample rank r -> per-sample axis (>= 0); batch refused.
int64_t sample_axis(Builder& b, const onnx::Node& n, int64_t axis, size_t r) {
  const int64_t full = int64_t(r) + 1;
  if (axis < 0) axis += full;
  if (axis <= 0 || axis >= full) b.fail(n, "axis " + std::to_string(axis) + " is the batch or out of range");
  return axis - 1;
}

// Window attributes of Conv / MaxPool / AveragePool: square kernel, equal strides and pads.
ConvWindow window(Builder& b, const onnx::Node& n, int64_t kernel_from_weight) {
  ConvWindow w;
  std::vector<int64_t> k = attr_ints(n, "kernel_shape");
  if (k.empty() && kernel_from_weight > 0) k = {kernel_from_weight, kernel_from_weight};
  if (k.size() != 2 || k[0] != k[1]) b.fail(n, "the engine supports square 2-D windows only (kernel_shape [k, k])");
  w.kernel = k[0];
  const std::vector<int64_t> s = attr_ints(n, "strides");
  if (!s.empty() && (s.size() != 2 || s[0] != s[1])) b.fail(n, "strides must be equal in both dimensions");
  if (!s.empty()) w.stride = s[0];
  const std::vector<int64_t> p = attr_ints(n, "pads");
  if (!p.empty() && (p.size() != 4 || p[0] != p[1] || p[0] != p[2] || p[0] != p[3]))
    b.fail(n, "pads must be the same on every side");
  if (!p.empty()) w.pad = p[0];
  for (int64_t d : attr_ints(n, "dilations"))
    if (d != 1) b.fail(n, "dilations other than 1 are not supported");
  if (const onnx::Attribute* a = n.attribute("auto_pad"); a && !a->s.empty() && a->s != "NOTSET")
    b.fail(n, "auto_pad " + a->s + " is not supported; export with explicit pads (PyTorch does)");
  if (attr_int(n, "ceil_mode", 0) != 0) b.fail(n, "ceil_mode 1 is not supported; use ceil_mode=False");
  if (w.kernel < 1 || w.stride < 1 || w.pad < 0)
    b.fail(n, "kernel " + std::to_string(w.kernel) + ", stride " + std::to_string(w.stride) + ", pad " +
                  std::to_string(w.pad) + ": kernel and stride must be at least 1 and pads not negative");
  return w;
}

int64_t window_out(Builder& b, const onnx::Node& n, int64_t in, const ConvWindow& w) {
  if (in + 2 * w.pad < w.kernel) b.fail(n, "the window is larger than the padded input");
  return (in + 2 * w.pad - w.kernel) / w.stride + 1;
}

namespace {

bool all_finite(const onnx::TensorData& t) {
  for (float v : t.floats)
    if (!std::isfinite(v)) return false;
  return true;
}

// A trained operand: an initializer of floats, more than a scalar, all finite.
bool trainable(const Value& v) {
  return v.initializer && v.data->is_floating() && v.data->numel() > 1 && all_finite(*v.data);
}

GraphTensor transposed(const onnx::TensorData& t) {  // (K, N) -> (N, K)
  GraphTensor g;
  g.name = t.name;  // the same parameter, stored (N, K) as the engine's linear weights
  const int64_t K = t.dims[0], N = t.dims[1];
  g.dims = {N, K};
  auto v = std::make_shared<std::vector<float>>(size_t(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) (*v)[size_t(j * K + k)] = t.floats[size_t(k * N + j)];
  g.values = v;
  return g;
}

// Broadcast of full shapes (batch marked -1 at dim 0 of activations), numpy rules.
Shape broadcast(Builder& b, const onnx::Node& n, const std::vector<Shape>& full) {
  size_t rank = 0;
  for (const Shape& s : full) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : full) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      const int64_t d = s[i];
      if (d == 1 || d == o) continue;
      if (o == 1) o = d;
      else b.fail(n, "operand shapes do not broadcast (dimension " + std::to_string(d) + " against " +
                         std::to_string(o) + ")");
    }
  }
  if (out.empty() || out[0] != -1)
    b.fail(n, "a constant operand has more dimensions than the activation (it would broadcast over the batch)");
  return Shape(out.begin() + 1, out.end());
}

Shape full_of(const Value& v) {
  if (v.constant) return v.data->dims;
  Shape s = v.shape;
  s.insert(s.begin(), -1);
  return s;
}


void linear_layer(Builder& b, const onnx::Node& n, const Value& x, GraphTensor w, const onnx::TensorData* bias,
                  const std::vector<std::string>& outputs) {
  const int64_t N = w.dims[0], K = w.dims[1];
  if (x.shape.empty() || x.shape.back() != K)
    b.fail(n, "input " + shape_string(x.shape) + " does not end in the weight's " + std::to_string(K) + " features");
  if (bias && bias->numel() != N) b.fail(n, "bias has " + std::to_string(bias->numel()) + " values for " + std::to_string(N) + " outputs");
  LayerDesc l = leaf(b, n, LayerKind::LINEAR, true);
  from(l, x);
  l.out = N;
  l.bias = bias != nullptr;
  l.initial.push_back(std::move(w));
  if (bias) l.initial.push_back(graph_tensor(*bias));
  infer(b, n, l);
  const int producer = int(b.layers.size());
  const Shape out = l.out_shape;
  b.add_layer(n, std::move(l));
  for (const std::string& o : outputs) {  // the fused bias Add's output is this layer's too
    Value v;
    v.producer = producer;
    v.shape = out;
    b.values[o] = v;
  }
}

void map_gemm(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  need_rank(b, n, x, 1, "(features)");
  const onnx::TensorData& w = b.constant(n, 1);
  if (attr_int(n, "transA", 0) != 0 || attr_float(n, "alpha", 1) != 1.0f || attr_float(n, "beta", 1) != 1.0f)
    b.fail(n, "Gemm with transA, alpha or beta other than 0, 1, 1 is not supported (nn.Linear exports the defaults)");
  if (w.dims.size() != 2 || !w.is_floating()) b.fail(n, "the weight must be a 2-D float initializer");
  GraphTensor wt = attr_int(n, "transB", 0) ? graph_tensor(w) : transposed(w);
  const onnx::TensorData* bias = n.inputs.size() > 2 && !n.inputs[2].empty() ? &b.constant(n, 2) : nullptr;
  linear_layer(b, n, x, std::move(wt), bias, {});
}

void map_matmul(Builder& b, const onnx::Node& n, size_t index) {
  const Value& a = b.activation(n, 0);
  if (b.is_constant(n, 1)) {
    const onnx::TensorData& w = b.constant(n, 1);
    if (w.dims.size() != 2 || !w.is_floating())
      b.fail(n, "a MatMul by a constant needs a 2-D float weight (K, N), got " + shape_string(w.dims));
    const onnx::TensorData* bias = nullptr;
    const onnx::Node* add = bias_add(b, n, index, w.dims[1], &bias);
    std::vector<std::string> outs;
    if (add) {
      outs.push_back(add->outputs.at(0));
      b.consumed.insert(add->outputs.at(0));
    }
    linear_layer(b, n, a, transposed(w), bias, outs);
    return;
  }
  const Value& c = b.activation(n, 1);
  const Shape& x = a.shape;
  const Shape& y = c.shape;
  if (x.size() < 2 || x.size() != y.size() || !std::equal(x.begin(), x.end() - 2, y.begin()) ||
      x.back() != y[y.size() - 2])
    b.fail(n, "multiplies " + shape_string(x) + " by " + shape_string(y) +
                  "; two activations need equal leading dims and (..., M, K) x (..., K, N)");
  LayerDesc l = leaf(b, n, LayerKind::MATMUL);
  from(l, a);
  from(l, c);
  l.out_shape = x;
  l.out_shape.back() = y.back();
  b.add_layer(n, std::move(l));
}

void map_batchnorm(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  if (x.shape.size() != 3 && x.shape.size() != 1) b.fail(n, "needs a (C, H, W) or (C) input, got " + shape_string(x.shape));
  const int64_t C = x.shape[0];
  LayerDesc l = leaf(b, n, LayerKind::BATCHNORM);
  from(l, x);
  for (size_t i = 1; i <= 4; ++i) {
    const onnx::TensorData& t = b.constant(n, i);
    if (t.numel() != C || !t.is_floating()) b.fail(n, "input " + std::to_string(i) + " must hold " + std::to_string(C) + " floats");
    (i <= 2 ? l.initial : l.constants).push_back(graph_tensor(t));  // scale, bias trained; mean, var kept
  }
  l.eps = attr_float(n, "epsilon", 1e-5f);
  l.momentum = attr_float(n, "momentum", 0.9f);
  l.out_shape = x.shape;
  l.parameter_count = 2 * C;
  b.add_layer(n, std::move(l));
}

void map_pool(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  need_rank(b, n, x, 3, "(C, H, W)");
  const ConvWindow w = window(b, n, 0);
  if (n.op_type == "AveragePool" && w.pad > 0 && attr_int(n, "count_include_pad", 0) == 0)
    b.fail(n, "padded average pooling must count the padding (count_include_pad=1, PyTorch's default)");
  if (2 * w.pad > w.kernel) b.fail(n, "pads must be at most half the kernel");
  LayerDesc l = leaf(b, n, n.op_type == "MaxPool" ? LayerKind::MAXPOOL2D : LayerKind::AVGPOOL2D);
  from(l, x);
  l.kernel = w.kernel;
  l.stride = w.stride;
  l.padding = w.pad;
  l.out_shape = {x.shape[0], window_out(b, n, x.shape[1], w), window_out(b, n, x.shape[2], w)};
  b.add_layer(n, std::move(l));
}

// Add / Sub / Mul / Div and Where: activations, constants and trained initializers, broadcast.
void map_elementwise(Builder& b, const onnx::Node& n) {
  const bool where = n.op_type == "Where";
  LayerDesc l = leaf(b, n, where ? LayerKind::WHERE : LayerKind::BINARY);
  std::vector<Shape> full;
  const size_t first = where ? 1 : 0;
  if (where) {
    const onnx::TensorData& cond = b.constant(n, 0);  // a causal mask
    l.constants.push_back(graph_tensor(cond));
    full.push_back(cond.dims);
  }
  for (size_t i = first; i < first + 2; ++i) {
    const Value& v = b.value(n, i);
    full.push_back(full_of(v));
    if (!v.constant) {
      from(l, v);
      l.axes.push_back(1);
    } else if (!where && trainable(v)) {
      l.initial.push_back(graph_tensor(*v.data));  // e.g. learned positions: a parameter
      l.parameter_count += v.data->numel();
      l.axes.push_back(2);
    } else {
      if (!v.data->is_floating() && !where) b.fail(n, "integer operands of arithmetic are not supported");
      l.constants.push_back(graph_tensor(*v.data));
      l.axes.push_back(0);
    }
  }
  if (l.graph_inputs.empty()) b.fail(n, "every operand is a constant (fold it before export)");
  l.out_shape = broadcast(b, n, full);
  b.add_layer(n, std::move(l));
}

void map_gather(Builder& b, const onnx::Node& n) {
  const onnx::TensorData& table = b.constant(n, 0);
  const Value& ids = b.activation(n, 1);
  if (ids.producer != -1 || table.dims.size() != 2 || !table.is_floating() || attr_int(n, "axis", 0) != 0)
    b.fail(n, "Gather is supported as an embedding: a (vocab, dim) float table indexed by the model's token input");
  LayerDesc l = leaf(b, n, LayerKind::GATHER);
  from(l, ids);
  l.vocab = table.dims[0];
  l.out = table.dims[1];
  l.initial.push_back(graph_tensor(table));
  l.parameter_count = table.numel();
  l.out_shape = ids.shape;
  l.out_shape.push_back(table.dims[1]);
  if (b.vocab == 0) b.vocab = table.dims[0];
  b.add_layer(n, std::move(l));
}

void map_layernorm(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  const int64_t axis = sample_axis(b, n, attr_int(n, "axis", -1), x.shape.size());
  if (axis != int64_t(x.shape.size()) - 1) b.fail(n, "only normalization over the last dimension is supported");
  if (std::fabs(attr_float(n, "epsilon", 1e-5f) - 1e-5f) > 1e-9f)
    b.fail(n, "epsilon must be 1e-5 (PyTorch's default; the engine's layer norm uses it)");
  const int64_t C = x.shape.back();
  LayerDesc l = leaf(b, n, LayerKind::LAYERNORM);
  from(l, x);
  const onnx::TensorData& scale = b.constant(n, 1);
  if (scale.numel() != C) b.fail(n, "scale must hold " + std::to_string(C) + " values");
  l.initial.push_back(graph_tensor(scale));
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    l.initial.push_back(graph_tensor(b.constant(n, 2)));
  } else {
    // no initializer: a bias of its own (unnamed, so never tied to another layer's)
    l.initial.push_back(GraphTensor{"", {C}, std::make_shared<const std::vector<float>>(size_t(C), 0.0f)});
  }
  infer(b, n, l);
  b.add_layer(n, std::move(l));
}


}  // namespace

void map_simple(Builder& b, const onnx::Node& n, LayerKind kind) {
  const Value& x = b.activation(n, 0);
  LayerDesc l = leaf(b, n, kind);
  from(l, x);
  if (kind == LayerKind::DROPOUT) {
    float ratio = attr_float(n, "ratio", 0.5f);
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      const onnx::TensorData& r = b.constant(n, 1);
      ratio = r.floats.empty() ? 0.5f : r.floats[0];
    }
    l.p = ratio;
  }
  if (kind == LayerKind::GELU) {
    if (const onnx::Attribute* a = n.attribute("approximate"); a && a->s != "none")
      b.fail(n, "only the exact (erf) GELU is supported");
  }
  if (kind == LayerKind::SOFTMAX) {
    const int64_t axis = sample_axis(b, n, attr_int(n, "axis", -1), x.shape.size());
    if (axis != int64_t(x.shape.size()) - 1) b.fail(n, "only softmax over the last dimension is supported");
    l.axes = {axis};
  }
  if (kind == LayerKind::RELU || kind == LayerKind::GELU || kind == LayerKind::DROPOUT) infer(b, n, l);
  else l.out_shape = x.shape;
  b.add_layer(n, std::move(l));
}

const std::vector<std::string>& supported_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v = {"Add", "AveragePool", "BatchNormalization", "Concat", "Conv", "Div", "Dropout",
                                  "Erf", "Flatten", "Gather", "Gelu", "Gemm", "GlobalAveragePool", "LayerNormalization",
                                  "MatMul", "MaxPool", "Mul", "Pad", "Relu", "Reshape", "Sigmoid", "Softmax", "Split", "Sub",
                                  "Tanh", "Transpose", "Where"};
    std::sort(v.begin(), v.end());
    return v;
  }();
  return ops;
}

bool map_node(Builder& b, const onnx::Node& n, size_t index) {
  const std::string& op = n.op_type;
  if (op == "Conv") map_conv(b, n);
  else if (op == "Gemm") map_gemm(b, n);
  else if (op == "MatMul") map_matmul(b, n, index);
  else if (op == "BatchNormalization") map_batchnorm(b, n);
  else if (op == "MaxPool" || op == "AveragePool") map_pool(b, n);
  else if (op == "GlobalAveragePool") map_global_pool(b, n);
  else if (op == "Flatten") map_flatten(b, n);
  else if (op == "Reshape") map_reshape(b, n);
  else if (op == "Transpose") map_transpose(b, n);
  else if (op == "Concat") map_concat(b, n);
  else if (op == "Pad") map_pad(b, n);
  else if (op == "Split") map_split(b, n);
  else if (op == "Div" && fuse_gelu(b, n, index)) return true;
  else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Where") map_elementwise(b, n);
  else if (op == "Gather") map_gather(b, n);
  else if (op == "LayerNormalization") map_layernorm(b, n);
  else if (op == "Relu") map_simple(b, n, LayerKind::RELU);
  else if (op == "Gelu") map_simple(b, n, LayerKind::GELU);
  else if (op == "Dropout") map_simple(b, n, LayerKind::DROPOUT);
  else if (op == "Softmax") map_simple(b, n, LayerKind::SOFTMAX);
  else if (op == "Sigmoid" || op == "Tanh" || op == "Erf") map_simple(b, n, LayerKind::UNARY);
  else return false;
  return true;
}

}  // namespace qsync::onnx_build
