// File: worker/layers/graph_ops.h
// The other layers of ONNX graphs (host loops, graph_host.h, except MatMul: the device's GEMMs).
//   SoftmaxLayer    softmax over the last dim; saves y. dx = y (dy - sum(dy y))
//   ReshapeLayer    (B, in...) -> (B, out...) same size: a view, nothing saved
//   TransposeLayer  per-sample perm (batch stays first); backward applies the inverse
//   ConcatLayer     activations along a per-sample axis; backward slices dy
//   MatMulLayer     (B, L..., M, K) x (B, L..., K, N) -> (B, L..., M, N) per slice on the rank's
//                   device in FP32 (attention scores and mixing); saves both operands
//   GatherLayer     token ids (B, T) (floats) -> rows of a trained (V, C) table: (B, T, C);
//                   ids out of range are refused with their position. No input gradient.
//   AvgPool2dLayer  (B, C, H, W) mean over k x k windows, zero padding counted (PyTorch's default)
//   PadLayer        zeros before/after each per-sample axis, negative amounts crop (Pad, Split's
//                   outputs); backward takes dy's entries that came from x
#pragma once

#include "worker/layers/graph.h"

namespace qsync {

class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return y_.defined() ? y_.bytes() : 0; }

 private:
  Tensor y_;  // host (B, S..., N)
};

class ReshapeLayer : public Layer {
 public:
  ReshapeLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
};

class TransposeLayer : public Layer {
 public:
  TransposeLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;

 private:
  std::vector<int64_t> perm_, inverse_;  // full (batch first)
};

class ConcatLayer : public MultiInputLayer {
 public:
  ConcatLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy, StepContext& ctx) override;

 private:
  int64_t axis_ = 0;  // per sample
};

class MatMulLayer : public MultiInputLayer {
 public:
  MatMulLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return a_.defined() ? a_.bytes() + b_.bytes() : 0; }

 private:
  int64_t M_ = 0, K_ = 0, N_ = 0, slices_ = 0;  // slices per sample: the product of L...
  Tensor a_, b_;  // (B, L..., M, K), (B, L..., K, N)
};

class GatherLayer : public Layer {
 public:
  GatherLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override { out.push_back(&table_); }
  int64_t saved_bytes() const override { return int64_t(ids_.size() * sizeof(int64_t)); }

 private:
  int64_t V_ = 0, C_ = 0;
  Parameter table_;  // (V, C)
  std::vector<int64_t> ids_;  // (B * T)
};

class AvgPool2dLayer : public Layer {
 public:
  AvgPool2dLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;

 private:
  int64_t C_ = 0, H_ = 0, W_ = 0, Ho_ = 0, Wo_ = 0;
};

class PadLayer : public Layer {
 public:
  PadLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;

 private:
  std::vector<int64_t> source_;  // per output element of a sample: the input element it copies, -1 a zero
};

}  // namespace qsync
