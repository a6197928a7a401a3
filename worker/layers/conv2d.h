// File: worker/layers/conv2d.h
// Conv2d in the layer's planned precision. The input and the weight are cast once (per-tensor
// scales commute with im2col) and only the cast input is saved; the convolution itself is one op
// of the rank's ops (DeviceOps::conv2d_forward / conv2d_backward): on the CPU GEMMs over im2col
// columns in chunks of samples (worker/ops/cpu/cpu_conv.cpp), on CUDA cuDNN or im2col GEMMs.
// A ReLU right after the layer can be fused (fuse_relu): applied in the convolution's output
// pass, its backward deferred to the convolution's where the device reads the mask on the fly.
// A 2x2 / stride-2 max pooling after that ReLU can be fused too (fuse_pool): where the device
// pools in the output pass (DeviceOps::conv2d_forward_pools: on the CPU the INT8 convolutions),
// the forward returns the pooled output and hands the pooling layer its argmax; elsewhere the
// layers run one after the other. Forward and backward keep their bits either way.
// The weight is the GEMMs' A operand (O rows): its INT8 scales are per output channel.
//   x (B, C, H, W) -> y (B, O, H', W');  W (O, C*k*k), b (O) FP32 masters.
#pragma once

#include "planner/layer_precision.h"
#include "worker/layer.h"
#include "worker/layers/activation.h"
#include "worker/layers/pool.h"
#include "worker/ops/cpu/cpu_kernels.h"  // im2col / col2im_add (calibration measures the im2col norm)

namespace qsync {


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
  // Applies `relu`, the layer right after this one, in this layer's output pass (no pass of its
  // own over the output) and hands it the mask its backward needs.
  void fuse_relu(ReluLayer& relu);
  // Runs `pool`, the 2x2 / stride-2 max pooling after the fused ReLU, in this layer's output pass
  // where the device can (the full output then never written), and hands it its argmax.
  void fuse_pool(MaxPool2dLayer& pool);
  const MaxPool2dLayer* fused_pool() const { return fused_pool_; }

 private:
  ConvGeometry g_;
  int64_t o_;
  Parameter weight_, bias_;  // (O, C*k*k), (O)
  LayerPrecision precision_ = LayerPrecision::FP32;
  Tensor x_saved_;  // (B, C, H, W) in the forward precision
  Tensor w_saved_;  // (O, C*k*k) in the forward precision
  ReluLayer* fused_relu_ = nullptr;
  MaxPool2dLayer* fused_pool_ = nullptr;
};

}  // namespace qsync
