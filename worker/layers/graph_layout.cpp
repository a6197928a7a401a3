// File: worker/layers/graph_layout.cpp
// Softmax, Reshape, Transpose, Concat and Pad of ONNX graphs: forward next to backward (graph_ops.h).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "worker/layers/graph_host.h"
#include "worker/layers/graph_ops.h"
#include "worker/layers/shape_check.h"

namespace qsync {

namespace {

Shape with_batch(int64_t batch, const Shape& s) {
  Shape f = s;
  f.insert(f.begin(), batch);
  return f;
}

// dst = src permuted: dst dim i is src dim perm[i] (full shapes, row-major).
void permute(const Tensor& src, const std::vector<int64_t>& perm, Tensor& dst) {
  const Shape& in = src.shape();
  const size_t r = in.size();
  std::vector<int64_t> in_strides(r, 1);
  for (size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * in[i];
  std::vector<int64_t> step(r);  // src stride along each dst dim
  for (size_t i = 0; i < r; ++i) step[i] = in_strides[size_t(perm[i])];
  const Shape& out = dst.shape();
  const float* s = src.f32();
  float* d = dst.f32();
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  const int64_t n = dst.numel();
  for (int64_t o = 0; o < n; ++o) {
    d[o] = s[off];
    for (size_t k = r; k-- > 0;) {
      off += step[k];
      if (++idx[k] < out[k]) break;
      off -= step[k] * out[k];
      idx[k] = 0;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Softmax (last dim)

SoftmaxLayer::SoftmaxLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.empty()) throw std::invalid_argument("layer '" + d.name + "': softmax needs a last dimension");
  desc_.out_shape = d.in_shape;
}

Tensor SoftmaxLayer::forward(const Tensor& x_in, StepContext& ctx) {
  check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  Tensor y = host_empty(x.shape(), ctx, name() + ".out");
  const int64_t N = desc_.in_shape.back(), rows = x.numel() / N;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xp = x.f32() + r * N;
    float* yp = y.f32() + r * N;
    float m = -INFINITY;
    for (int64_t j = 0; j < N; ++j) m = std::max(m, xp[j]);
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) {
      yp[j] = m == -INFINITY ? 0.0f : std::exp(xp[j] - m);  // a row of -inf (all masked) gives zeros
      sum += yp[j];
    }
    const float inv = sum > 0 ? float(1.0 / sum) : 0.0f;
    for (int64_t j = 0; j < N; ++j) yp[j] *= inv;
  }
  y_ = ctx.training ? y : Tensor();
  return to_rank(y, ctx, name() + ".out");
}

Tensor SoftmaxLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  check_batched(dy_in, desc_.out_shape, name(), "dy");
  if (!y_.defined() || y_.shape() != dy_in.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const Tensor dy = host_of(dy_in);
  Tensor dx = host_empty(dy.shape(), ctx, name() + ".dx");
  const int64_t N = desc_.in_shape.back(), rows = dy.numel() / N;
  for (int64_t r = 0; r < rows; ++r) {
    const float* y = y_.f32() + r * N;
    const float* g = dy.f32() + r * N;
    float* d = dx.f32() + r * N;
    double dot = 0;
    for (int64_t j = 0; j < N; ++j) dot += double(g[j]) * y[j];
    for (int64_t j = 0; j < N; ++j) d[j] = y[j] * (g[j] - float(dot));
  }
  y_ = Tensor();
  return to_rank(dx, ctx, name() + ".dx");
}

// ---------------------------------------------------------------------------------------------
// Reshape (a view)

ReshapeLayer::ReshapeLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (shape_numel(d.in_shape) != shape_numel(d.out_shape))
    throw std::invalid_argument("layer '" + d.name + "': reshape " + tensor_shape_string(d.in_shape) + " to " +
                                tensor_shape_string(d.out_shape) + " changes the size");
}

Tensor ReshapeLayer::forward(const Tensor& x, StepContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  return x.reshape(with_batch(B, desc_.out_shape));
}

Tensor ReshapeLayer::backward(const Tensor& dy, StepContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  return dy.reshape(with_batch(B, desc_.in_shape));
}

// ---------------------------------------------------------------------------------------------
// Transpose

TransposeLayer::TransposeLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.axes.size() != d.in_shape.size())
    throw std::invalid_argument("layer '" + d.name + "': transpose perm must name every per-sample dim");
  perm_ = {0};
  desc_.out_shape.clear();
  for (int64_t a : d.axes) {
    perm_.push_back(a + 1);
    desc_.out_shape.push_back(d.in_shape.at(size_t(a)));
  }
  inverse_.assign(perm_.size(), 0);
  for (size_t i = 0; i < perm_.size(); ++i) inverse_[size_t(perm_[i])] = int64_t(i);
}

Tensor TransposeLayer::forward(const Tensor& x_in, StepContext& ctx) {
  const int64_t B = check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  Tensor y = host_empty(with_batch(B, desc_.out_shape), ctx, name() + ".out");
  permute(x, perm_, y);
  return to_rank(y, ctx, name() + ".out");
}

Tensor TransposeLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  const int64_t B = check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  Tensor dx = host_empty(with_batch(B, desc_.in_shape), ctx, name() + ".dx");
  permute(dy, inverse_, dx);
  return to_rank(dx, ctx, name() + ".dx");
}

// ---------------------------------------------------------------------------------------------
// Concat: outer = product of dims before the axis (batch included), inner = after it.

ConcatLayer::ConcatLayer(const LayerDesc& d, MemoryAccount* memory) : MultiInputLayer(d) {
  (void)memory;
  if (d.axes.size() != 1 || d.axes[0] < 0 || d.axes[0] >= int64_t(d.in_shape.size()))
    throw std::invalid_argument("layer '" + d.name + "': concat needs a per-sample axis");
  axis_ = d.axes[0];
}

Tensor ConcatLayer::forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) {
  const int64_t B = xs.at(0).dim(0);
  for (size_t i = 0; i < xs.size(); ++i) check_batched(xs[i], desc_.input_shapes.at(i), name(), "input");
  Tensor y = host_empty(with_batch(B, desc_.out_shape), ctx, name() + ".out");
  int64_t outer = B, inner = 1;
  for (int64_t k = 0; k < axis_; ++k) outer *= desc_.out_shape[size_t(k)];
  for (size_t k = size_t(axis_) + 1; k < desc_.out_shape.size(); ++k) inner *= desc_.out_shape[k];
  const int64_t out_row = desc_.out_shape[size_t(axis_)] * inner;
  int64_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor x = host_of(xs[i]);
    const int64_t row = desc_.input_shapes[i][size_t(axis_)] * inner;
    for (int64_t o = 0; o < outer; ++o) std::copy(x.f32() + o * row, x.f32() + (o + 1) * row, y.f32() + o * out_row + at);
    at += row;
  }
  return to_rank(y, ctx, name() + ".out");
}

std::vector<Tensor> ConcatLayer::backward_inputs(const Tensor& dy_in, StepContext& ctx) {
  const int64_t B = check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  int64_t outer = B, inner = 1;
  for (int64_t k = 0; k < axis_; ++k) outer *= desc_.out_shape[size_t(k)];
  for (size_t k = size_t(axis_) + 1; k < desc_.out_shape.size(); ++k) inner *= desc_.out_shape[k];
  const int64_t out_row = desc_.out_shape[size_t(axis_)] * inner;
  std::vector<Tensor> dxs;
  int64_t at = 0;
  for (const Shape& s : desc_.input_shapes) {
    Tensor dx = host_empty(with_batch(B, s), ctx, name() + ".dx");
    const int64_t row = s[size_t(axis_)] * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::copy(dy.f32() + o * out_row + at, dy.f32() + o * out_row + at + row, dx.f32() + o * row);
    at += row;
    dxs.push_back(to_rank(dx, ctx, name() + ".dx"));
  }
  return dxs;
}

// ---------------------------------------------------------------------------------------------
// Pad (and crop)

PadLayer::PadLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  const size_t r = d.in_shape.size();
  if (d.axes.size() != 2 * r)
    throw std::invalid_argument("layer '" + d.name + "': pad needs " + std::to_string(2 * r) + " amounts, has " +
                                std::to_string(d.axes.size()));
  Shape out(r);
  for (size_t i = 0; i < r; ++i) out[i] = d.in_shape[i] + d.axes[i] + d.axes[r + i];
  if (out != d.out_shape || shape_numel(out) <= 0)
    throw std::invalid_argument("layer '" + d.name + "': pads of " + tensor_shape_string(d.in_shape) + " give " +
                                tensor_shape_string(out) + ", not " + tensor_shape_string(d.out_shape));
  std::vector<int64_t> in_strides(r, 1);
  for (size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * d.in_shape[i];
  source_.assign(size_t(shape_numel(out)), -1);
  std::vector<int64_t> idx(r, 0);  // the output multi-index
  for (size_t o = 0; o < source_.size(); ++o) {
    int64_t src = 0;
    bool inside = true;
    for (size_t i = 0; i < r && inside; ++i) {
      const int64_t at = idx[i] - d.axes[i];
      inside = at >= 0 && at < d.in_shape[i];
      src += at * in_strides[i];
    }
    if (inside) source_[o] = src;
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < out[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor PadLayer::forward(const Tensor& x_in, StepContext& ctx) {
  const int64_t B = check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  Tensor y = host_empty(with_batch(B, desc_.out_shape), ctx, name() + ".out");
  const int64_t in = shape_numel(desc_.in_shape), out = int64_t(source_.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < out; ++o) {
      const int64_t s = source_[size_t(o)];
      y.f32()[b * out + o] = s < 0 ? 0.0f : x.f32()[b * in + s];
    }
  return to_rank(y, ctx, name() + ".out");
}

Tensor PadLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  const int64_t B = check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  Tensor dx = host_empty(with_batch(B, desc_.in_shape), ctx, name() + ".dx");
  const int64_t in = shape_numel(desc_.in_shape), out = int64_t(source_.size());
  std::fill(dx.f32(), dx.f32() + dx.numel(), 0.0f);  // cropped entries get no gradient
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < out; ++o)
      if (const int64_t s = source_[size_t(o)]; s >= 0) dx.f32()[b * in + s] = dy.f32()[b * out + o];
  return to_rank(dx, ctx, name() + ".dx");
}

}  // namespace qsync
