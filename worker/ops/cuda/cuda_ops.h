// File: worker/ops/cuda/cuda_ops.h
// The CUDA implementation of the op interface (worker/ops/device_ops.h) for one rank: its
// device (selected by the device class: LOCAL_RANK), one compute stream on which every op is
// enqueued in call order, the stream-ordered tensor memory (cuda_memory.h), one cuBLASLt engine
// and one cuDNN engine on that stream, and what reaches the host: the loss sums, the optimizer's
// norm and skip flag, deferred errors and op timings (CUDA events) are copied to pinned memory
// asynchronously and delivered by synchronize(), which the trainer calls once per step: no op
// synchronizes the device.
//
// What runs where (per op family, files beside this one):
//   cuda_ops.cpp            memory, copies, synchronize, timings
//   cuda_ops_precision.cpp  the precision casts (kernels/cuda/quantize_cuda.h) and matmul
//                           (kernels/cuda/cublaslt_matmul.h: INT8 on IMMA, FP8 on sm89+, TN staging)
//   cuda_ops_layers.cpp     elementwise, layer norm, embedding, pooling, loss, optimizer
//   cuda_ops_attention.cpp  attention: batched cuBLASLt products and the row softmax
//   cuda_ops_conv.cpp       Conv2d: cuDNN for FP32 / TF32 / BF16 / FP16, im2col GEMMs for INT8 / FP8
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/ops/cuda/cuda_memory.h"
#include "worker/ops/device_ops.h"

namespace qsync {

class CudaMatmulEngine;
class CudnnConvEngine;
class CudaOptimizerKernels;

class CudaOps final : public DeviceOps {
 public:
  // Makes `device` current on this thread, creates the stream and engines, and registers the
  // device's tensor memory (tensor_memory_register). One per device per process.
  explicit CudaOps(int device);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::cuda(device_); }
  int sm() const { return sm_; }
  void* stream() const { return stream_; }  // cudaStream_t
  CudaTensorMemory& memory() { return *memory_; }
  CudaMatmulEngine& matmul_engine() { return *matmul_; }
  CudnnConvEngine& conv_engine() { return *conv_; }
  // "NVIDIA H200 (sm90, 132 SMs, 141 GB), CUDA runtime 13.0, driver 13.0, cuBLASLt ..., cuDNN ..."
  std::string describe() const;

  void fill_zero(Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override;
  TimeMark time_mark() override;
  void record_time(OpTimer& timer, const std::string& op, const TimeMark& start, const TimeMark& end) override;

  void matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& c, const MatmulOptions& o) override;
  bool gemm_wants_k_contiguous(Precision p) const override;
  int int8_a_operand_max() const override { return 127; }

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
  bool conv2d_forward_pools(const Tensor&, const Tensor&, const ConvGeometry&) const override { return false; }
  bool conv_backward_reads_relu_mask() const override { return false; }

  void softmax_xent(const Tensor& logits, const Tensor& targets, float loss_divisor, float grad_scale,
                    Tensor& dlogits, XentSums* sums) override;
  void optimizer_step(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u,
                      OptimizerStepResult* result) override;

  // Page-locks existing host memory for asynchronous copies (cudaHostRegister), until
  // unpin_host or the end of these ops.
  void pin_host(void* p, int64_t bytes);
  void unpin_host(void* p);

  // Device scratch for one op (unaccounted: scratch lives only inside the op, stream-ordered).
  Tensor scratch(int64_t bytes, const std::string& what);
  // An asynchronous copy of `bytes` device bytes into pinned memory, delivered to `host` at the
  // next synchronize().
  void deliver_to_host(const void* device, int64_t bytes, void* host);
  // The same copy, handed to `consume` at the next synchronize() (which rethrows the first
  // exception a consumer throws: deferred errors such as a bad token id).
  void on_host(const void* device, int64_t bytes, std::function<void(const void*)> consume);

 private:
  struct Pending;  // deliveries, deferred checks and timings of the current step
  void require_here(const Tensor& t, const char* op) const;
  // conv2d_forward before its epilogue: y = conv(xc, wc) + bias.
  void conv2d_forward_affine(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g, Tensor& y,
                             StepContext& ctx, const std::string& layer);

  int device_;
  int sm_;
  void* stream_;  // cudaStream_t
  std::unique_ptr<CudaTensorMemory> memory_;
  std::unique_ptr<CudaMatmulEngine> matmul_;
  std::unique_ptr<CudnnConvEngine> conv_;
  std::unique_ptr<CudaOptimizerKernels> optimizer_;
  std::unique_ptr<Pending> pending_;
  std::vector<void*> pinned_host_;
};

}  // namespace qsync
