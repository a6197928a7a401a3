// File: worker/layers/activation.h
// Elementwise activations. Shapes: x (B, in_shape...) -> y of the same shape.
//   ReluLayer  y = max(x, 0); saves a 1-byte mask (x > 0) for backward: B * numel(in_shape) bytes
//              (fused after a convolution: that layer applies it and writes the mask)
//   GeluLayer  y = 0.5 x (1 + erf(x / sqrt 2)), the exact GELU of PyTorch's nn.GELU();
//              saves its FP32 derivative at x (written in the same pass as y)
#pragma once

#include "worker/layer.h"

namespace qsync {

class ReluLayer : public Layer {
 public:
  ReluLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return mask_.defined() ? mask_.bytes() : 0; }
  // The layer before applies this ReLU in its own output pass (Conv2dLayer::fuse_relu): the
  // forward passes its input through and keeps the mask that layer handed over. When that layer
  // asks (defer_backward: its backward reads the mask on the fly), the backward passes dy through
  // and leaves the masking to it (backward_deferred), unless an observer must see the masked
  // gradient.
  void set_applied_by_previous_layer() { applied_by_previous_layer_ = true; }
  bool applied_by_previous_layer() const { return applied_by_previous_layer_; }
  bool backward_deferred(const StepContext& ctx) const { return defer_backward_ && ctx.observer == nullptr; }
  // output_pooled: the layer before also ran the max pooling after this ReLU (Conv2dLayer::
  // fuse_pool), so the next forward's input is that pooling's output.
  void take_mask(Tensor mask, bool defer_backward = false, bool output_pooled = false) {
    mask_ = std::move(mask);
    defer_backward_ = defer_backward && mask_.defined();
    output_pooled_ = output_pooled;
  }
  const Tensor& mask() const { return mask_; }  // (B, in_shape...) uint8 0/1

 private:
  Tensor mask_;  // (B, in_shape...) uint8 0/1, stored as a 1-byte (INT8) tensor
  bool applied_by_previous_layer_ = false;
  bool defer_backward_ = false;
  bool output_pooled_ = false;
};

class GeluLayer : public Layer {
 public:
  GeluLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return derivative_.defined() ? derivative_.bytes() : 0; }

 private:
  Tensor derivative_;  // (B, in_shape...) FP32: dy/dx at the training forward's input
};

}  // namespace qsync
