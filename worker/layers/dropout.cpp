// File: worker/layers/dropout.cpp
// Inverted dropout with a counter-based mask (see dropout.h).
#include "worker/layers/dropout.h"

#include <stdexcept>

#include "worker/layers/layer_seed.h"
#include "worker/layers/shape_check.h"

namespace qsync {

DropoutLayer::DropoutLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (!(d.p >= 0.0 && d.p <= 1.0))
    throw std::invalid_argument("layer '" + d.name + "': dropout p must be in [0, 1], got " + std::to_string(d.p));
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  desc_.out_shape = d.in_shape;
}

Tensor DropoutLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  mask_ = Tensor();
  identity_forward_ = false;
  const double p = desc_.p;
  if (!ctx.training || p == 0.0) {
    identity_forward_ = ctx.training;
    return x;
  }
  DeviceOps& ops = ops_of(ctx);
  const uint64_t key = layer_seed(ctx.seed, ctx.step, name());
  Tensor y = ops.empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");        // (B, N...)
  mask_ = ops.empty(x.shape(), Precision::INT8, ctx.memory, name() + ".mask");          // (B, N...)
  ops.dropout_forward(x, p, key, y, mask_);
  return y;
}

Tensor DropoutLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (identity_forward_) {
    identity_forward_ = false;
    return dy;
  }
  if (!mask_.defined() || mask_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  ops.dropout_backward(dy, mask_, desc_.p, dx);
  mask_ = Tensor();
  return dx;
}

}  // namespace qsync
