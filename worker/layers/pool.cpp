// File: worker/layers/pool.cpp
// Max pooling (argmax saved for backward) and global average pooling.
#include "worker/layers/pool.h"

#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// MaxPool2d

MaxPool2dLayer::MaxPool2dLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() != 3)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d needs an image input (C, H, W), got " +
                                tensor_shape_string(d.in_shape));
  if (d.kernel < 1 || d.stride < 1 || d.padding < 0 || 2 * d.padding > d.kernel)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d needs kernel >= 1, stride >= 1 and " +
                                "0 <= padding <= kernel / 2 (kernel " + std::to_string(d.kernel) + ", stride " +
                                std::to_string(d.stride) + ", padding " + std::to_string(d.padding) + ")");
  C_ = d.in_shape[0];
  H_ = d.in_shape[1];
  W_ = d.in_shape[2];
  if (H_ + 2 * d.padding < d.kernel || W_ + 2 * d.padding < d.kernel)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d kernel " + std::to_string(d.kernel) +
                                " is larger than the padded input " + tensor_shape_string(d.in_shape));
  Ho_ = (H_ + 2 * d.padding - d.kernel) / d.stride + 1;
  Wo_ = (W_ + 2 * d.padding - d.kernel) / d.stride + 1;
  check_resolved_shape(d.out_shape, {C_, Ho_, Wo_}, d.name, "out_shape");
  desc_.out_shape = {C_, Ho_, Wo_};
}

Tensor MaxPool2dLayer::forward(const Tensor& x, StepContext& ctx) {
  last_pooled_by_previous_layer_ = pooled_by_previous_layer_;
  if (pooled_by_previous_layer_) {  // x is this pooling's output (Conv2dLayer::fuse_pool)
    pooled_by_previous_layer_ = false;
    const int64_t B = check_batched(x, desc_.out_shape, name(), "input (pooled by the layer before)");
    if (ctx.training && (!argmax_.defined() || argmax_.dim(0) != B))
      throw std::logic_error("layer '" + name() + "': pooled by the layer before, which handed over no argmax");
    return x;
  }
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty({B, C_, Ho_, Wo_}, Precision::FP32, ctx.memory, name() + ".out");  // (B, C, Ho, Wo)
  argmax_ = Tensor();
  if (ctx.training) argmax_ = ops.empty({B, C_, Ho_, Wo_}, Precision::FP32, ctx.memory, name() + ".argmax");
  ops.maxpool_forward(x, geometry(), y, ctx.training ? &argmax_ : nullptr);
  return y;
}

Tensor MaxPool2dLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!argmax_.defined() || argmax_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty({B, C_, H_, W_}, Precision::FP32, ctx.memory, name() + ".dx");  // (B, C, H, W)
  ops.maxpool_backward(dy, argmax_, geometry(), dx);
  argmax_ = Tensor();
  return dx;
}

// ---------------------------------------------------------------------------------------------
// GlobalAvgPool

GlobalAvgPoolLayer::GlobalAvgPoolLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() == 3) {  // (C, H, W)
    channels_ = d.in_shape[0];
    positions_ = d.in_shape[1] * d.in_shape[2];
  } else if (d.in_shape.size() == 2) {  // (T, C)
    tokens_ = true;
    positions_ = d.in_shape[0];
    channels_ = d.in_shape[1];
  } else {
    throw std::invalid_argument("layer '" + d.name + "': global_avg_pool needs (C, H, W) or (T, C), got " +
                                tensor_shape_string(d.in_shape));
  }
  if (positions_ < 1)
    throw std::invalid_argument("layer '" + d.name + "': global_avg_pool over an empty input " +
                                tensor_shape_string(d.in_shape));
  check_resolved_shape(d.out_shape, {channels_}, d.name, "out_shape");
  desc_.out_shape = {channels_};
}

Tensor GlobalAvgPoolLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  DeviceOps& ops = ops_of(ctx);
  Tensor y = ops.empty({B, channels_}, Precision::FP32, ctx.memory, name() + ".out");  // (B, C)
  ops.avgpool_forward(x, channels_, positions_, tokens_, y);
  return y;
}

Tensor GlobalAvgPoolLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  DeviceOps& ops = ops_of(ctx);
  Tensor dx = ops.empty(batched_shape(B, desc_.in_shape), Precision::FP32, ctx.memory, name() + ".dx");
  ops.avgpool_backward(dy, channels_, positions_, tokens_, dx);
  return dx;
}

}  // namespace qsync
