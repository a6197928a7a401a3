// File: worker/layers/conv2d.h
// Conv2d as GEMM over im2col, in the layer's planned precision. The input is cast once (per
// tensor scales commute with im2col), im2col runs on the cast bytes in chunks of S samples that
// fit in cache, and only the cast input is saved (the columns are rebuilt in backward).
// Columns are (C*k*k, S*H'*W'), so im2col and col2im move contiguous image rows and the GEMMs
// produce channel-major outputs:
//   forward      y (O, S*H'W')   = W (O, CKK) cols (CKK, S*H'W')         NN, W is the A operand
//   input grad   dcols (CKK, S*H'W') = W^T dy (O, S*H'W')               TN
//   weight grad  dW (O, CKK)    += dy (O, S*H'W') cols^T                 NT
//   x (B, C, H, W) -> y (B, O, H', W');  W (O, C*k*k), b (O) FP32 masters.
#pragma once

#include "planner/layer_precision.h"
#include "worker/layer.h"

namespace qsync {

// Geometry of one convolution.
struct ConvGeometry {
  int64_t c, h, w, k, stride, pad, oh, ow;
};


class Conv2dLayer : public Layer {
 public:
  Conv2dLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  void apply_plan(const RankPlan& plan) override { precision_ = plan.precision_of(name()); }
  int64_t saved_bytes() const override;
  LayerPrecision precision() const { return precision_; }
  void set_precision(LayerPrecision p) { precision_ = p; }

 private:
  ConvGeometry g_;
  int64_t o_;
  Parameter weight_, bias_;  // (O, C*k*k), (O)
  LayerPrecision precision_ = LayerPrecision::FP32;
  Tensor x_saved_;  // (B, C, H, W) in the forward precision
  Tensor w_saved_;  // (O, C*k*k) in the forward precision

  int64_t chunk_samples() const;
};

// im2col of samples [s0, s0 + S) of x (B, C, H, W) with `elem` bytes per element into
// cols (C*k*k, S*H'*W'); out-of-image taps are zero bytes (0 in every format we use).
void im2col(const void* x, int elem, int64_t s0, int64_t samples, const ConvGeometry& g, void* cols);
// Adds cols (C*k*k, S*H'*W') FP32 back into dx (B, C, H, W) for samples [s0, s0 + S).
void col2im_add(const float* cols, int64_t s0, int64_t samples, const ConvGeometry& g, float* dx);

}  // namespace qsync
