// File: worker/layers/graph_compute.cpp
// MatMul of two activations, Gather (embedding) and AveragePool of ONNX graphs: forward next to
// backward (graph_ops.h).
#include <stdexcept>

#include "worker/layers/graph_host.h"
#include "worker/layers/graph_ops.h"
#include "worker/layers/parameter_init.h"
#include "worker/layers/shape_check.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// MatMul: per slice s, C_s (M, N) = A_s (M, K) B_s (K, N); dA_s = dC_s B_s^T, dB_s = A_s^T dC_s

MatMulLayer::MatMulLayer(const LayerDesc& d, MemoryAccount* memory) : MultiInputLayer(d) {
  (void)memory;
  if (d.input_shapes.size() != 2 || d.input_shapes[0].size() < 2)
    throw std::invalid_argument("layer '" + d.name + "': matmul needs two inputs of rank 2 or more per sample");
  const Shape& a = d.input_shapes[0];
  const Shape& b = d.input_shapes[1];
  M_ = a[a.size() - 2], K_ = a.back(), N_ = b.back();
  slices_ = shape_numel(a) / (M_ * K_);
  if (b.size() != a.size() || b[b.size() - 2] != K_ || shape_numel(b) / (K_ * N_) != slices_)
    throw std::invalid_argument("layer '" + d.name + "': matmul operands " + tensor_shape_string(a) + " and " +
                                tensor_shape_string(b) + " do not match");
  desc_.out_shape = a;
  desc_.out_shape.back() = N_;
}

Tensor MatMulLayer::forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) {
  const int64_t B = check_batched(xs.at(0), desc_.input_shapes[0], name(), "input a");
  check_batched(xs.at(1), desc_.input_shapes[1], name(), "input b");
  DeviceOps& ops = ops_of(ctx);
  Shape out = desc_.out_shape;
  out.insert(out.begin(), B);
  Tensor y = ops.empty(out, Precision::FP32, ctx.memory, name() + ".out");
  for (int64_t s = 0; s < B * slices_; ++s) {
    Tensor c = y.view(s * M_ * N_, {M_, N_});
    ops.matmul(xs[0].view(s * M_ * K_, {M_, K_}), Transpose::NO, xs[1].view(s * K_ * N_, {K_, N_}), Transpose::NO, c, {});
  }
  a_ = b_ = Tensor();
  if (ctx.training) a_ = xs[0], b_ = xs[1];
  return y;
}

std::vector<Tensor> MatMulLayer::backward_inputs(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!a_.defined() || a_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  Tensor da = ops.empty(a_.shape(), Precision::FP32, ctx.memory, name() + ".da");
  Tensor db = ops.empty(b_.shape(), Precision::FP32, ctx.memory, name() + ".db");
  for (int64_t s = 0; s < B * slices_; ++s) {
    const Tensor g = dy.view(s * M_ * N_, {M_, N_});
    Tensor das = da.view(s * M_ * K_, {M_, K_});
    Tensor dbs = db.view(s * K_ * N_, {K_, N_});
    ops.matmul(g, Transpose::NO, b_.view(s * K_ * N_, {K_, N_}), Transpose::YES, das, {});
    ops.matmul(a_.view(s * M_ * K_, {M_, K_}), Transpose::YES, g, Transpose::NO, dbs, {});
  }
  a_ = b_ = Tensor();
  return {da, db};
}

// ---------------------------------------------------------------------------------------------
// Gather (embedding rows)

GatherLayer::GatherLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  V_ = d.vocab, C_ = d.out;
  if (V_ < 1 || C_ < 1) throw std::invalid_argument("layer '" + d.name + "': gather needs a (vocab, dim) table");
  desc_.out_shape = d.in_shape;
  desc_.out_shape.push_back(C_);
  table_ = parameter_allocate(d.name + ".weight", {V_, C_}, true, memory);
}

Tensor GatherLayer::forward(const Tensor& x_in, StepContext& ctx) {
  const int64_t B = check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  const Tensor table = host_of(table_.value);
  Shape out = desc_.out_shape;
  out.insert(out.begin(), B);
  Tensor y = host_empty(out, ctx, name() + ".out");
  ids_.resize(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float f = x.f32()[i];
    const int64_t id = int64_t(f);
    if (f != float(id) || id < 0 || id >= V_)
      throw std::invalid_argument("layer '" + name() + "': token id " + std::to_string(f) + " at position " +
                                  std::to_string(i) + " is not in [0, " + std::to_string(V_) + ")");
    ids_[size_t(i)] = id;
    std::copy(table.f32() + id * C_, table.f32() + (id + 1) * C_, y.f32() + i * C_);
  }
  if (!ctx.training) ids_.clear();
  return to_rank(y, ctx, name() + ".out");
}

Tensor GatherLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  check_batched(dy_in, desc_.out_shape, name(), "dy");
  if (int64_t(ids_.size()) * C_ != dy_in.numel())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const Tensor dy = host_of(dy_in);
  Tensor g = Tensor::zeros({V_, C_}, Precision::FP32, nullptr, name() + ".dtable");
  for (size_t i = 0; i < ids_.size(); ++i) {
    const float* src = dy.f32() + int64_t(i) * C_;
    float* dst = g.f32() + ids_[i] * C_;
    for (int64_t c = 0; c < C_; ++c) dst[c] += src[c];
  }
  accumulate_grad(table_, g, ctx);
  ids_.clear();
  return Tensor();  // token ids have no gradient
}

// ---------------------------------------------------------------------------------------------
// AveragePool: y = sum over the window / k^2 (padding counts)

AvgPool2dLayer::AvgPool2dLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() != 3 || d.kernel < 1 || d.stride < 1 || d.padding < 0)
    throw std::invalid_argument("layer '" + d.name + "': avgpool needs a (C, H, W) input and a window");
  C_ = d.in_shape[0], H_ = d.in_shape[1], W_ = d.in_shape[2];
  Ho_ = (H_ + 2 * d.padding - d.kernel) / d.stride + 1;
  Wo_ = (W_ + 2 * d.padding - d.kernel) / d.stride + 1;
  check_resolved_shape(d.out_shape, {C_, Ho_, Wo_}, d.name, "out_shape");
  desc_.out_shape = {C_, Ho_, Wo_};
}

Tensor AvgPool2dLayer::forward(const Tensor& x_in, StepContext& ctx) {
  const int64_t B = check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  Tensor y = host_empty({B, C_, Ho_, Wo_}, ctx, name() + ".out");
  const int64_t k = desc_.kernel, s = desc_.stride, p = desc_.padding;
  const float inv = 1.0f / float(k * k);
  for (int64_t bc = 0; bc < B * C_; ++bc) {
    const float* xp = x.f32() + bc * H_ * W_;
    float* yp = y.f32() + bc * Ho_ * Wo_;
    for (int64_t oh = 0; oh < Ho_; ++oh)
      for (int64_t ow = 0; ow < Wo_; ++ow) {
        float sum = 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t h = oh * s - p + i, w = ow * s - p + j;
            if (h >= 0 && h < H_ && w >= 0 && w < W_) sum += xp[h * W_ + w];
          }
        yp[oh * Wo_ + ow] = sum * inv;
      }
  }
  return to_rank(y, ctx, name() + ".out");
}

Tensor AvgPool2dLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  const int64_t B = check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  Tensor dx = Tensor::zeros({B, C_, H_, W_}, Precision::FP32, ops_of(ctx).device().is_host() ? ctx.memory : nullptr,
                            name() + ".dx");
  const int64_t k = desc_.kernel, s = desc_.stride, p = desc_.padding;
  const float inv = 1.0f / float(k * k);
  for (int64_t bc = 0; bc < B * C_; ++bc) {
    const float* g = dy.f32() + bc * Ho_ * Wo_;
    float* d = dx.f32() + bc * H_ * W_;
    for (int64_t oh = 0; oh < Ho_; ++oh)
      for (int64_t ow = 0; ow < Wo_; ++ow)
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t h = oh * s - p + i, w = ow * s - p + j;
            if (h >= 0 && h < H_ && w >= 0 && w < W_) d[h * W_ + w] += g[oh * Wo_ + ow] * inv;
          }
  }
  return to_rank(dx, ctx, name() + ".dx");
}

}  // namespace qsync
