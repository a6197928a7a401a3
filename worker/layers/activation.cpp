// File: worker/layers/activation.cpp
// ReLU and exact-erf GELU: forward next to backward, each one op of the rank's device.
#include "worker/layers/activation.h"

#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

namespace {

void check_elementwise_desc(LayerDesc& d) {
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  d.out_shape = d.in_shape;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReLU

ReluLayer::ReluLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  check_elementwise_desc(desc_);
}

Tensor ReluLayer::forward(const Tensor& x, StepContext& ctx) {
  if (applied_by_previous_layer_) {  // x is rectified (and maybe pooled); the previous layer handed over the mask
    const int64_t B = x.dim(0);
    if (!output_pooled_) check_batched(x, desc_.in_shape, name(), "input");
    if (ctx.training && (!mask_.defined() || mask_.shape() != batched_shape(B, desc_.in_shape)))
      throw std::logic_error("layer '" + name() + "': applied by the previous layer, which handed over no mask");
    return x;
  }
  check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, N...)
  mask_ = Tensor();
  if (ctx.training) mask_ = ops.empty(x.shape(), Precision::INT8, ctx.memory, name() + ".mask");  // (B, N...) 0/1
  ops.relu_forward(x, y, ctx.training ? &mask_ : nullptr);
  return y;
}

Tensor ReluLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (!mask_.defined() || mask_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  if (backward_deferred(ctx)) return dy;  // the convolution before masks it (and drops the mask)
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  ops.relu_backward(dy, mask_, dx);
  mask_ = Tensor();
  return dx;
}

// ---------------------------------------------------------------------------------------------
// GELU (exact): y = x * Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2));  dy/dx = Phi(x) + x * phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi). The training forward saves dy/dx (computed in the same pass
// as y, from the same erf), so the backward is one multiply instead of an erf and an exp.

GeluLayer::GeluLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  check_elementwise_desc(desc_);
}

Tensor GeluLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, N...)
  derivative_ = ctx.training ? ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".dydx") : Tensor();
  ops.gelu_forward(x, y, derivative_.defined() ? &derivative_ : nullptr);
  return y;
}

Tensor GeluLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (!derivative_.defined() || derivative_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  ops.gelu_backward(derivative_, dy, dx);
  derivative_ = Tensor();
  return dx;
}

}  // namespace qsync
