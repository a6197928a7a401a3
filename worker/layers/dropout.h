// File: worker/layers/dropout.h
// Inverted dropout: in training, y = x * keep / (1 - p) with keep ~ Bernoulli(1 - p); in eval (or
// p == 0) y = x (the input itself, no copy; backward then returns dy itself). p == 1 zeroes
// everything.
// The mask is counter-based, not a sequential RNG: element i (flat index in the rank's (B, ...)
// tensor) is kept when
//   hash_to_unit(counter_hash(layer_seed(ctx.seed, ctx.step, name), i)) >= p
// (worker/layers/layer_seed.h), so it depends only on (seed, step, layer name, i): the same with
// any thread count, and rerunnable for a given step.
// Saves the mask as 1 byte per element (uint8 0/1 in an INT8-sized tensor) in training.
#pragma once

#include "worker/layer.h"

namespace qsync {

class DropoutLayer : public Layer {
 public:
  DropoutLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return mask_.defined() ? mask_.bytes() : 0; }

 private:
  bool identity_forward_ = false;  // the last training forward passed x through (p == 0)
  Tensor mask_;                    // (B, in_shape...) uint8
};

}  // namespace qsync
