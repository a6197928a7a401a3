// File: worker/ops/cpu_ops.h
// The host implementation of the op interface (worker/ops/device_ops.h): the training engine's
// OpenMP loops and the host GEMM backends (oneDNN, ref), on host tensors. Every op runs at once,
// so host-visible results are ready when the call returns and synchronize() only checks.
// Reductions run in a fixed order (rows, batch, parameters in order), so results do not depend
// on the thread count. One implementation file per op family under worker/ops/cpu/.
#pragma once

#include "worker/ops/device_ops.h"

namespace qsync {

struct ConvOnednnCall;  // kernels/cpu/conv_onednn.h

class CpuOps final : public DeviceOps {
 public:
  const char* name() const override { return "cpu"; }
  Device device() const override { return Device::host(); }

  void fill_zero(Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override {}
  TimeMark time_mark() override;
  void record_time(OpTimer& timer, const std::string& op, const TimeMark& start, const TimeMark& end) override;

  void matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& c, const MatmulOptions& o) override;
  bool gemm_wants_k_contiguous(Precision) const override { return false; }  // oneDNN takes strides
  int int8_a_operand_max() const override;

  void convert(const Tensor& src, Tensor& dst) override;
  void round_to_sixteen_bit(Tensor& x, Precision p) override;
  void quantize_int8(const Tensor& x, const Int8Quantization& spec, Tensor& q, Tensor* q_transposed) override;
  void quantize_fp8(const Tensor& x, Tensor& q, Tensor* q_transposed) override;
  void dequantize_int8(const Tensor& q, Tensor& out, Precision round_to) override;
  void transpose(const Tensor& src, Tensor& dst) override;

  void relu_forward(const Tensor& x, Tensor& y, Tensor* mask) override;
  void relu_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) override;
  void relu_backward_convert(const Tensor& dy, const Tensor& mask, Tensor& dx) override;
  void gelu_forward(const Tensor& x, Tensor& y, Tensor* dydx) override;
  void gelu_backward(const Tensor& dydx, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void dropout_forward(const Tensor& x, double p, uint64_t key, Tensor& y, Tensor& mask) override;
  void dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) override;
  void transpose_batched(const Tensor& src, Tensor& dst, int64_t batch, int64_t rows, int64_t cols) override;
  void add_broadcast(const Tensor& x, const Tensor& table, Tensor& y) override;
  void sum_batch_into(const Tensor& dy, Tensor& table) override;
  void bias_grad_rows(const Tensor& dy, Tensor& db) override;

  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor* xhat,
                         Tensor* rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& xhat, const Tensor& rstd, const Tensor& w, Tensor& dx,
                          Tensor& dw, Tensor& db) override;
  void embedding_ids(const Tensor& x, int64_t vocab, Tensor& ids, const std::string& layer) override;
  void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, Tensor& y) override;
  void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dwte, Tensor& dwpe) override;
  void maxpool_forward(const Tensor& x, const PoolGeometry& g, Tensor& y, Tensor* argmax) override;
  void maxpool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, Tensor& dx) override;
  void avgpool_forward(const Tensor& x, int64_t channels, int64_t positions, bool tokens, Tensor& y) override;
  void avgpool_backward(const Tensor& dy, int64_t channels, int64_t positions, bool tokens, Tensor& dx) override;
  void attention_forward(const Tensor& qkv, const AttentionShape& s, bool allow_tf32, Tensor& att, Tensor& out,
                         StepContext& ctx, const std::string& layer) override;
  void attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s,
                          bool allow_tf32, Tensor& dqkv, StepContext& ctx, const std::string& layer) override;
  void conv2d_forward(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                      const ConvEpilogue& epilogue, Tensor& y, StepContext& ctx, const std::string& layer) override;
  void conv2d_backward(const Conv2dBackward& a, const ConvGeometry& g, StepContext& ctx,
                       const std::string& layer) override;
  bool conv2d_forward_pools(const Tensor& xc, const Tensor& wc, const ConvGeometry& g) const override;
  bool conv_backward_reads_relu_mask() const override { return true; }
  bool optimizer_makes_int8_rows() const override { return true; }

  void softmax_xent(const Tensor& logits, const Tensor& targets, float loss_divisor, float grad_scale,
                    Tensor& dlogits, XentSums* sums) override;
  void optimizer_step(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u,
                      OptimizerStepResult* result) override;

 private:
  // conv2d_backward on oneDNN's convolutions (the calls planned by cpu_conv.cpp's
  // onednn_backward_calls); converted: the gradient already cast by the bias pass, or undefined.
  void conv2d_backward_onednn(const Conv2dBackward& a, ConvOnednnCall& data, ConvOnednnCall& weights,
                              const Tensor& converted, StepContext& ctx, const std::string& layer);
  // dx of a layer whose gradient gq (B, O, H', W') and weights are INT8 per tensor, on oneDNN;
  // false when oneDNN has no kernel for it.
  bool conv2d_input_grad_onednn(const Tensor& gq, const Tensor& wb, const ConvGeometry& g, Tensor& dx,
                                StepContext& ctx, const std::string& layer);
  // conv2d_backward's im2col path (cpu_conv_chunks.cpp): dy (B, O, H', W') FP32 (masked), gq its
  // whole cast (undefined: cast_dy per chunk), dx by col2im when dx_on_im2col; dW +=; chunks of
  // at most largest_chunk samples.
  void conv2d_backward_chunks(const Conv2dBackward& a, const ConvGeometry& g, const Tensor& dy, const Tensor& gq,
                              bool dx_on_im2col, int64_t largest_chunk, StepContext& ctx, const std::string& layer);
};

}  // namespace qsync
