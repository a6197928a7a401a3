// File: worker/layers/reshape.cpp
// Flatten (a view) and ToTokens (a (C, HW) -> (HW, C) transpose per sample).
#include "worker/layers/reshape.h"

#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// Flatten

FlattenLayer::FlattenLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  int64_t n = 1;
  for (int64_t s : d.in_shape) n *= s;
  check_resolved_shape(d.out_shape, {n}, d.name, "out_shape");
  desc_.out_shape = {n};
}

Tensor FlattenLayer::forward(const Tensor& x, StepContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  return x.reshape(batched_shape(B, desc_.out_shape));  // (B, N)
}

Tensor FlattenLayer::backward(const Tensor& dy, StepContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  return dy.reshape(batched_shape(B, desc_.in_shape));  // (B, in_shape...)
}

// ---------------------------------------------------------------------------------------------
// ToTokens

ToTokensLayer::ToTokensLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() != 3)
    throw std::invalid_argument("layer '" + d.name + "': to_tokens needs an image input (C, H, W), got " +
                                tensor_shape_string(d.in_shape));
  C_ = d.in_shape[0];
  HW_ = d.in_shape[1] * d.in_shape[2];
  check_resolved_shape(d.out_shape, {HW_, C_}, d.name, "out_shape");
  desc_.out_shape = {HW_, C_};
}

Tensor ToTokensLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty({B, HW_, C_}, Precision::FP32, ctx.memory, name() + ".out");  // (B, H*W, C)
  ops.transpose_batched(x, y, B, C_, HW_);
  return y;
}

Tensor ToTokensLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(batched_shape(B, desc_.in_shape), Precision::FP32, ctx.memory,
                        name() + ".dx");  // (B, C, H, W)
  ops.transpose_batched(dy, dx, B, HW_, C_);
  return dx;
}

}  // namespace qsync
