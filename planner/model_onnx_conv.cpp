// File: planner/model_onnx_conv.cpp
// ONNX Conv -> the engine's conv2d (square kernels, dilation 1: window() of model_onnx_ops.cpp).
// A grouped Conv (group G > 1: ResNeXt, depthwise convolutions): for each group g a PAD layer
// cropping its C/G input channels and an engine conv2d of its (O/G, C/G, k, k) slice of the
// weight (and bias), then one Concat of the G outputs along the channels, bound to the node's
// output. The conv2d layers are GEMM-like: plans give each group its precision, named
// "<node>.g<g>". The slices are parameters of their own ("<initializer>#g<g>").
#include "planner/model_onnx_build.h"

namespace qsync::onnx_build {
namespace {

// Rows [first, first + count) of the leading dimension of `t`, as a tensor named `name`.
GraphTensor leading_slice(const onnx::TensorData& t, int64_t first, int64_t count, const std::string& name) {
  const int64_t inner = t.numel() / t.dims[0];
  GraphTensor g;
  g.name = name;
  g.dims = t.dims;
  g.dims[0] = count;
  g.values = std::make_shared<const std::vector<float>>(t.floats.begin() + first * inner,
                                                        t.floats.begin() + (first + count) * inner);
  return g;
}

std::string named(Builder& b, const std::string& name) {
  std::string unique = name;
  for (int k = 2; b.names.count(unique); ++k) unique = name + "_" + std::to_string(k);
  b.names.insert(unique);
  return unique;
}

}  // namespace

void map_conv(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  need_rank(b, n, x, 3, "(C, H, W)");
  const onnx::TensorData& w = b.constant(n, 1);
  const int64_t groups = attr_int(n, "group", 1);
  if (groups < 1 || x.shape[0] % groups != 0 || (w.dims.size() == 4 && w.dims[0] % groups != 0))
    b.fail(n, "group " + std::to_string(groups) + " must divide the input's " + std::to_string(x.shape[0]) +
                  " and the output's channels");
  if (w.dims.size() != 4 || w.dims[0] <= 0 || w.dims[1] != x.shape[0] / groups)
    b.fail(n, "weight " + shape_string(w.dims) + " does not match input channels " + std::to_string(x.shape[0]) +
                  (groups > 1 ? " in " + std::to_string(groups) + " groups" : ""));
  const ConvWindow win = window(b, n, w.dims[2]);
  if (w.dims[2] != win.kernel || w.dims[3] != win.kernel) b.fail(n, "weight dims do not match kernel_shape");
  if (groups > 1) {
    const onnx::TensorData* bias = n.inputs.size() > 2 && !n.inputs[2].empty() ? &b.constant(n, 2) : nullptr;
    map_grouped_conv(b, n, x, w, bias, groups, win);
    return;
  }
  LayerDesc l = leaf(b, n, LayerKind::CONV2D, true);
  from(l, x);
  l.out = w.dims[0];
  l.kernel = win.kernel;
  l.stride = win.stride;
  l.padding = win.pad;
  l.bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  l.initial.push_back(graph_tensor(w));
  if (l.bias) l.initial.push_back(graph_tensor(b.constant(n, 2)));
  infer(b, n, l);
  b.add_layer(n, std::move(l));
}

void map_grouped_conv(Builder& b, const onnx::Node& n, const Value& x, const onnx::TensorData& w,
                      const onnx::TensorData* bias, int64_t groups, const ConvWindow& win) {
  if (!w.is_floating() || (bias && (!bias->is_floating() || bias->numel() != w.dims[0])))
    b.fail(n, "a grouped convolution needs a float weight and a float bias of " + std::to_string(w.dims[0]) + " values");
  const std::string base = b.layer_name(n, true);
  const int64_t C = x.shape[0], Cg = C / groups, Og = w.dims[0] / groups;
  LayerDesc cat;
  cat.name = named(b, base + ".concat");
  cat.kind = LayerKind::CONCAT;
  cat.op = "Concat";
  for (int64_t g = 0; g < groups; ++g) {
    LayerDesc crop;
    crop.name = named(b, base + ".g" + std::to_string(g) + ".in");
    crop.kind = LayerKind::PAD;
    crop.op = "Conv";
    from(crop, x);
    crop.axes.assign(2 * x.shape.size(), 0);
    crop.axes[0] = -g * Cg;                                // before: the channels of earlier groups cut
    crop.axes[x.shape.size()] = -(C - (g + 1) * Cg);       // after: those of later groups
    crop.out_shape = x.shape;
    crop.out_shape[0] = Cg;
    const int crop_index = int(b.layers.size());
    b.layers.push_back(crop);

    LayerDesc conv;
    conv.name = named(b, base + ".g" + std::to_string(g));
    conv.kind = LayerKind::CONV2D;
    conv.op = "Conv";
    conv.graph_inputs = {crop_index};
    conv.input_shapes = {crop.out_shape};
    conv.in_shape = crop.out_shape;
    conv.out = Og;
    conv.kernel = win.kernel;
    conv.stride = win.stride;
    conv.padding = win.pad;
    conv.bias = bias != nullptr;
    conv.initial.push_back(leading_slice(w, g * Og, Og, w.name + "#g" + std::to_string(g)));
    if (bias) conv.initial.push_back(leading_slice(*bias, g * Og, Og, bias->name + "#g" + std::to_string(g)));
    infer(b, n, conv);
    Value out;
    out.producer = int(b.layers.size());
    out.shape = conv.out_shape;
    b.layers.push_back(std::move(conv));
    from(cat, out);
  }
  cat.axes = {0};
  cat.out_shape = cat.in_shape;
  cat.out_shape[0] = Og * groups;
  b.add_layer(n, std::move(cat));
}

}  // namespace qsync::onnx_build
