// File: worker/layers/pool.h
// Pooling layers.
//   MaxPool2dLayer      (B, C, H, W) -> (B, C, Ho, Wo), window `kernel`, step `stride`, zero
//                       `padding` (padded cells never win); Ho = (H + 2 padding - kernel) / stride + 1.
//                       Saves the winning input index per output (int32): B * C * Ho * Wo * 4 bytes.
//                       Ties go to the first cell in row-major window order (as PyTorch's CPU kernel).
//   GlobalAvgPoolLayer  images (B, C, H, W) -> (B, C), mean over H * W;
//                       tokens (B, T, C) -> (B, C), mean over T. Saves nothing.
#pragma once

#include "worker/layer.h"

namespace qsync {

class MaxPool2dLayer : public Layer {
 public:
  MaxPool2dLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return argmax_.defined() ? argmax_.bytes() : 0; }
  // Whether this is a 2x2 window at stride 2 without padding (Conv2dLayer::fuse_pool).
  bool pools_2x2() const { return desc_.kernel == 2 && desc_.stride == 2 && desc_.padding == 0; }
  // The layer before ran this pooling in its output pass this forward (`pooled`; else it did not):
  // the next forward passes its input, the pooled output, through and keeps `argmax` (training).
  void take_pooled(bool pooled, Tensor argmax) {
    pooled_by_previous_layer_ = pooled;
    if (pooled) argmax_ = std::move(argmax);
  }
  // Whether the last forward's pooling ran in the layer before (the profiler charges it there).
  bool last_pooled_by_previous_layer() const { return last_pooled_by_previous_layer_; }

 private:
  PoolGeometry geometry() const { return {C_, H_, W_, desc_.kernel, desc_.stride, desc_.padding, Ho_, Wo_}; }
  int64_t C_ = 0, H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;
  Tensor argmax_;  // (B, C, Ho, Wo) int32 index into the (H, W) plane, stored as a 4-byte tensor
  bool pooled_by_previous_layer_ = false;
  bool last_pooled_by_previous_layer_ = false;
};

class GlobalAvgPoolLayer : public Layer {
 public:
  GlobalAvgPoolLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;

 private:
  bool tokens_ = false;        // input (T, C) rather than (C, H, W)
  int64_t channels_ = 0;       // C
  int64_t positions_ = 0;      // H * W, or T
};

}  // namespace qsync
