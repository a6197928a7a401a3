// File: worker/layers/layernorm.cpp
// LayerNorm forward/backward (the arithmetic: DeviceOps::layernorm_forward / layernorm_backward).
#include "worker/layers/layernorm.h"

#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

LayerNormLayer::LayerNormLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.in_shape.empty() || d.in_shape.back() < 1)
    throw std::invalid_argument("layer '" + d.name + "': layernorm needs an input with a last dimension, got " +
                                tensor_shape_string(d.in_shape));
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  desc_.out_shape = d.in_shape;
  C_ = d.in_shape.back();
  weight_.name = d.name + ".weight";
  weight_.value = Tensor::empty({C_}, Precision::FP32, memory, weight_.name);
  weight_.grad = Tensor::zeros({C_}, Precision::FP32, memory, weight_.name + ".grad");
  weight_.decay = false;
  bias_.name = d.name + ".bias";
  bias_.value = Tensor::empty({C_}, Precision::FP32, memory, bias_.name);
  bias_.grad = Tensor::zeros({C_}, Precision::FP32, memory, bias_.name + ".grad");
  bias_.decay = false;
  std::mt19937_64 unused;
  init_parameters(unused);
}

void LayerNormLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

void LayerNormLayer::init_parameters(std::mt19937_64& rng) {
  (void)rng;  // deterministic: weight 1, bias 0
  float* w = weight_.value.f32();
  float* b = bias_.value.f32();
  for (int64_t c = 0; c < C_; ++c) {
    w[c] = 1.0f;
    b[c] = 0.0f;
  }
}

int64_t LayerNormLayer::saved_bytes() const {
  return (xhat_.defined() ? xhat_.bytes() : 0) + (rstd_.defined() ? rstd_.bytes() : 0);
}

Tensor LayerNormLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  const int64_t R = x.numel() / C_;  // rows
  Tensor y = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, ..., C)
  xhat_ = Tensor();
  rstd_ = Tensor();
  if (ctx.training) {
    xhat_ = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".xhat");
    rstd_ = ops.empty({R}, Precision::FP32, ctx.memory, name() + ".rstd");
  }
  ops.layernorm_forward(x, weight_.value, bias_.value, EPS, y, ctx.training ? &xhat_ : nullptr,
                        ctx.training ? &rstd_ : nullptr);
  return y;
}

// dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = w * dy;
// dweight += sum_rows dy * xhat, dbias += sum_rows dy
Tensor LayerNormLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (!xhat_.defined() || xhat_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, ..., C)
  ops.layernorm_backward(dy, xhat_, rstd_, weight_.value, dx, weight_.grad, bias_.grad);
  xhat_ = Tensor();
  rstd_ = Tensor();
  return dx;
}

}  // namespace qsync
