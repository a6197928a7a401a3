// File: planner/model_onnx_layout.cpp
// ONNX nodes that move data: GlobalAveragePool (the engine's pool and a (C, 1, 1) view),
// Flatten, Reshape (the batch kept: its first entry -1 or 0), Transpose (the batch stays first)
// Concat (off the batch), Pad (constant zeros, negative pads crop) and Split (each output a crop:
// a PAD layer reading the same input). Per-sample shapes inferred, anything else refused naming
// the node.
#include <algorithm>

#include "planner/model_onnx_build.h"

namespace qsync::onnx_build {

void map_global_pool(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  need_rank(b, n, x, 3, "(C, H, W)");
  LayerDesc pool = leaf(b, n, LayerKind::GLOBAL_AVG_POOL);
  from(pool, x);
  infer(b, n, pool);  // (C)
  LayerDesc view;
  view.name = pool.name + ".view";
  b.names.insert(view.name);
  view.kind = LayerKind::RESHAPE;
  view.op = "Reshape";
  view.graph_inputs = {int(b.layers.size())};
  view.input_shapes = {pool.out_shape};
  view.in_shape = pool.out_shape;
  view.out_shape = {x.shape[0], 1, 1};  // ONNX keeps the spatial dims
  b.layers.push_back(std::move(pool));
  b.add_layer(n, std::move(view));
}

void reshape_to(Builder& b, const onnx::Node& n, const Value& x, Shape out) {
  if (shape_numel(out) != shape_numel(x.shape))
    b.fail(n, "reshapes " + shape_string(x.shape) + " to " + shape_string(out) + " (a different size per sample)");
  LayerDesc l = leaf(b, n, LayerKind::RESHAPE);
  from(l, x);
  l.out_shape = std::move(out);
  b.add_layer(n, std::move(l));
}

void map_flatten(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  const int64_t axis = sample_axis(b, n, attr_int(n, "axis", 1), x.shape.size());
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.push_back(shape_numel(Shape(x.shape.begin() + axis, x.shape.end())));
  reshape_to(b, n, x, out);
}

void map_reshape(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  const onnx::TensorData& s = b.constant(n, 1);
  if (s.ints.empty()) b.fail(n, "the target shape must be a constant int64 tensor");
  if (s.ints[0] != -1 && s.ints[0] != 0)
    b.fail(n, "the target shape " + shape_string(s.ints) + " fixes the batch to " + std::to_string(s.ints[0]) +
                  "; write the model with reshape(-1, ...) or view(x.size(0), ...) exported with a dynamic batch");
  Shape out;
  int infer_at = -1;
  for (size_t i = 1; i < s.ints.size(); ++i) {
    int64_t d = s.ints[i];
    if (d == 0 && attr_int(n, "allowzero", 0) == 0) {
      if (i - 1 >= x.shape.size()) b.fail(n, "0 copies a dimension the input does not have");
      d = x.shape[i - 1];
    }
    if (d < -1) b.fail(n, "the target shape " + shape_string(s.ints) + " has a negative dimension");
    if (d == -1) {
      if (infer_at >= 0 || s.ints[0] == -1) b.fail(n, "more than one dimension of the target shape is inferred (-1)");
      infer_at = int(out.size());
      d = 1;
    }
    out.push_back(d);
  }
  if (infer_at >= 0) {
    const int64_t known = shape_numel(out);
    if (known <= 0 || shape_numel(x.shape) % known != 0) b.fail(n, "the inferred dimension does not divide the size");
    out[size_t(infer_at)] = shape_numel(x.shape) / known;
  }
  reshape_to(b, n, x, out);
}

void map_transpose(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  std::vector<int64_t> perm = attr_ints(n, "perm");
  if (perm.size() != x.shape.size() + 1 || perm[0] != 0)
    b.fail(n, "perm " + shape_string(perm) + " must keep the batch first and name every dimension");
  LayerDesc l = leaf(b, n, LayerKind::TRANSPOSE);
  from(l, x);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != int64_t(i)) b.fail(n, "perm " + shape_string(perm) + " is not a permutation");
  for (size_t i = 1; i < perm.size(); ++i) {
    if (perm[i] < 1 || perm[i] > int64_t(x.shape.size())) b.fail(n, "perm entry out of range");
    l.axes.push_back(perm[i] - 1);
    l.out_shape.push_back(x.shape[size_t(perm[i] - 1)]);
  }
  b.add_layer(n, std::move(l));
}

void map_concat(Builder& b, const onnx::Node& n) {
  LayerDesc l = leaf(b, n, LayerKind::CONCAT);
  for (size_t i = 0; i < n.inputs.size(); ++i) from(l, b.activation(n, i));
  const int64_t axis = sample_axis(b, n, attr_int(n, "axis", 0), l.in_shape.size());
  l.axes = {axis};
  l.out_shape = l.in_shape;
  l.out_shape[size_t(axis)] = 0;
  for (const Shape& s : l.input_shapes) {
    for (size_t d = 0; d < s.size(); ++d)
      if (s.size() != l.in_shape.size() || (int64_t(d) != axis && s[d] != l.in_shape[d]))
        b.fail(n, "inputs " + shape_string(l.in_shape) + " and " + shape_string(s) + " differ off the concat axis");
    l.out_shape[size_t(axis)] += s[size_t(axis)];
  }
  b.add_layer(n, std::move(l));
}

namespace {

// A PAD layer of `x`: per-sample before/after amounts (negative: crop) in l.axes = [before..., after...].
LayerDesc pad_layer(Builder& b, const onnx::Node& n, const Value& x, const std::vector<int64_t>& before,
                    const std::vector<int64_t>& after) {
  LayerDesc l = leaf(b, n, LayerKind::PAD);
  from(l, x);
  l.axes = before;
  l.axes.insert(l.axes.end(), after.begin(), after.end());
  constexpr int64_t limit = int64_t(1) << 30;  // beyond any tensor the engine trains (and no overflow below)
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (before[d] > limit || before[d] < -limit || after[d] > limit || after[d] < -limit)
      b.fail(n, "pads (" + std::to_string(before[d]) + ", " + std::to_string(after[d]) + ") of dimension " +
                    std::to_string(d + 1) + " are out of range");
    const int64_t out = x.shape[d] + before[d] + after[d];
    if (out <= 0 || -before[d] >= x.shape[d] || -after[d] >= x.shape[d])
      b.fail(n, "pads (" + std::to_string(before[d]) + ", " + std::to_string(after[d]) + ") of dimension " +
                    std::to_string(d + 1) + " leave nothing of its " + std::to_string(x.shape[d]) + " entries");
    l.out_shape.push_back(out);
  }
  return l;
}

}  // namespace

// Pad (opset 11+: pads, optional constant_value and axes inputs; mode constant with value 0).
void map_pad(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  if (const onnx::Attribute* a = n.attribute("mode"); a && !a->s.empty() && a->s != "constant")
    b.fail(n, "mode '" + a->s + "' is not supported; the engine pads with zeros (mode 'constant', F.pad's default)");
  const std::vector<int64_t> pads = n.inputs.size() > 1 ? b.constant(n, 1).ints : attr_ints(n, "pads");
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const onnx::TensorData& v = b.constant(n, 2);
    for (float f : v.floats)
      if (f != 0.0f) b.fail(n, "constant_value " + std::to_string(f) + " is not supported; the engine pads with zeros");
    for (int64_t i : v.ints)
      if (i != 0) b.fail(n, "constant_value " + std::to_string(i) + " is not supported; the engine pads with zeros");
  }
  const size_t full = x.shape.size() + 1;
  std::vector<int64_t> axes;
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) axes = b.constant(n, 3).ints;
  else for (size_t d = 0; d < full; ++d) axes.push_back(int64_t(d));
  if (pads.size() != 2 * axes.size())
    b.fail(n, "pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(axes.size()) + " axes (2 per axis)");
  std::vector<int64_t> before(x.shape.size(), 0), after(x.shape.size(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + int64_t(full) : axes[k];
    if (a < 0 || a >= int64_t(full)) b.fail(n, "axis " + std::to_string(axes[k]) + " is out of range");
    if (a == 0) {
      if (pads[k] != 0 || pads[k + axes.size()] != 0) b.fail(n, "pads the batch dimension; pad only per-sample axes");
      continue;
    }
    before[size_t(a - 1)] = pads[k];
    after[size_t(a - 1)] = pads[k + axes.size()];
  }
  b.add_layer(n, pad_layer(b, n, x, before, after));
}

// Split: output i is the crop of its part along the (per-sample) axis; sizes from the `split`
// input (opset 13+) or attribute, else equal parts (num_outputs, or the outputs' count).
void map_split(Builder& b, const onnx::Node& n) {
  const Value& x = b.activation(n, 0);
  const int64_t axis = sample_axis(b, n, attr_int(n, "axis", 0), x.shape.size());
  const int64_t dim = x.shape[size_t(axis)];
  std::vector<int64_t> sizes = n.inputs.size() > 1 && !n.inputs[1].empty() ? b.constant(n, 1).ints : attr_ints(n, "split");
  const int64_t parts = int64_t(n.outputs.size());
  if (sizes.empty()) {
    if (parts == 0 || dim % parts != 0)
      b.fail(n, "splits " + std::to_string(dim) + " entries into " + std::to_string(parts) + " equal parts");
    sizes.assign(size_t(parts), dim / parts);
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s < 0 || s > dim ? dim + 1 : s;  // (a part outside 0..dim fails below)
  if (int64_t(sizes.size()) != parts || total != dim)
    b.fail(n, "split sizes " + shape_string(sizes) + " must be " + std::to_string(parts) + " parts summing to " +
                  std::to_string(dim));
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int64_t> before(x.shape.size(), 0), after(x.shape.size(), 0);
    before[size_t(axis)] = -offset;
    after[size_t(axis)] = -(dim - offset - sizes[i]);
    offset += sizes[i];
    if (n.outputs[i].empty() || sizes[i] == 0) continue;
    LayerDesc l = pad_layer(b, n, x, before, after);
    Value v;
    v.producer = int(b.layers.size());
    v.shape = l.out_shape;
    l.op = n.op_type;
    b.layers.push_back(std::move(l));
    b.values[n.outputs[i]] = v;
  }
}

}  // namespace qsync::onnx_build
