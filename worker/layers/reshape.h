// File: worker/layers/reshape.h
// Layers that only move data.
//   FlattenLayer   (B, d1, d2, ...) -> (B, d1 * d2 * ...). A view: the output shares the input's
//                  storage (and dx shares dy's); nothing is copied or saved.
//   ToTokensLayer  (B, C, H, W) -> (B, H * W, C): image positions become tokens (row-major h, w).
//                  A copy; saves nothing.
#pragma once

#include "worker/layer.h"

namespace qsync {

class FlattenLayer : public Layer {
 public:
  FlattenLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
};

class ToTokensLayer : public Layer {
 public:
  ToTokensLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;

 private:
  int64_t C_ = 0, HW_ = 0;
};

}  // namespace qsync
