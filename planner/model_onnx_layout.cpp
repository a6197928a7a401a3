// File: planner/model_onnx_layout.cpp
// ONNX nodes that move data: GlobalAveragePool (the engine's pool and a (C, 1, 1) view),
// Flatten, Reshape (the batch kept: its first entry -1 or 0), Transpose (the batch stays first)
// and Concat (off the batch). Per-sample shapes inferred, anything else refused naming the node.
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

}  // namespace qsync::onnx_build
