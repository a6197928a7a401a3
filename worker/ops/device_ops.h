// File: worker/ops/device_ops.h
// THE op interface of the training engine: every computation that a layer, the loss, the
// optimizer or the model performs on tensors, as one abstract class with one implementation per
// kind of device, chosen by the rank's device:
//   CpuOps  (worker/ops/cpu_ops.h)        host memory, OpenMP loops, GEMMs on the host backends
//   CudaOps (worker/ops/cuda/cuda_ops.h)  device memory, one compute stream, cuBLASLt, cuDNN and
//                                         the kernels of kernels/cuda/
// Layers are device-agnostic: they allocate through ops.empty and compute through these ops
// (ops_of(ctx): the rank's ops, CpuOps when StepContext::ops is unset). The precision policy
// (which cast a layer precision needs, worker/precision_ops.h) stays above this interface; the
// ops below are its primitives.
//
// Ordering and host values. Ops run in call order: CpuOps at once, CudaOps enqueued on the
// rank's compute stream (no op synchronizes the device). Results that reach the host (XentSums,
// OptimizerStepResult, deferred errors such as a bad token id, op timings) are valid once
// synchronize() returns; the trainer calls it once per step.
//
// Every tensor argument lives on this ops' device unless said otherwise; FP32 unless said
// otherwise; shapes are in the comments as (B, ...). "+=" marks an accumulating output.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/quantize.h"
#include "worker/tensor.h"

namespace qsync {

class OpTimer;
struct StepContext;

// Geometry of one convolution (square kernel k, zero padding pad) and of one pooling window.
struct ConvGeometry {
  int64_t c, h, w, k, stride, pad, oh, ow;
};
// What a convolution's forward applies after its bias: nothing, or a ReLU, y = y > 0 ? y : 0
// (NaN and -0 to +0, as relu_forward), writing the ReLU's mask (uint8 0/1, (B, O, OH, OW)) when
// relu_mask is set: the ReLU layer that follows a convolution runs in the convolution's output
// pass (Conv2dLayer::fuse_relu). With `pool` (where conv2d_forward_pools says the device can) a
// 2x2 / stride-2 max pooling follows in the same pass: y is then the pooled (B, O, OH / 2, OW / 2)
// and pool_argmax, when set, each window's winning index in its (OH, OW) plane (maxpool_forward's
// argmax, int32); the full output is never written (the max pooling layer after the ReLU runs
// there: Conv2dLayer::fuse_pool).
struct ConvEpilogue {
  bool relu = false;
  Tensor* relu_mask = nullptr;
  bool pool = false;
  Tensor* pool_argmax = nullptr;
};
struct PoolGeometry {
  int64_t c, h, w, kernel, stride, pad, oh, ow;
};
// Attention over tokens: x (B, T, C) with C = heads * head size.
struct AttentionShape {
  int64_t batch, tokens, width, heads;
  bool causal;
};

// INT8 quantization of a tensor: one scale per tensor, or per leading row (a weight's output
// channels); scale = amax / qmax.
struct Int8Quantization {
  bool per_row = false;
  int qmax = 127;
  Rounding rounding = Rounding::NEAREST_EVEN;
  uint64_t seed = 0;  // stochastic rounding noise: stochastic_uniform(seed, flat source index)
  // Per tensor only: quantize mask ? x : +0 (a ReLU's mask, uint8 0/1, x's shape), the gradient
  // the ReLU's backward would have written.
  const Tensor* relu_mask = nullptr;
  // Per tensor only: the amax of the (masked) source when the caller already has it, else < 0.
  // A hint: it must be the value the cast would compute, which the device may skip computing.
  float known_amax = -1.0f;
};

// The matmul's extras: C = op(A) op(B) + beta C [+ bias on every row] and the row sums of op(A).
struct MatmulOptions {
  float beta = 0.0f;
  const Tensor* bias = nullptr;  // (n) FP32: C[i, j] += bias[j] after the product
  Tensor* row_sums_of_a = nullptr;  // (m) FP32 += sum_k op(A)[i, k]; op(A) must be FP32 (a Linear's dy)
};

// Conv2d's backward, in one call (CPU: chunks of samples; CUDA: cuDNN or im2col GEMMs).
struct Conv2dBackward {
  const Tensor* dy = nullptr;  // (B, O, OH, OW) FP32
  const Tensor* x = nullptr;   // (B, C, H, W) the saved input as the backward GEMMs read it
  const Tensor* w = nullptr;   // (O, C*k*k) the backward weight operand
  // FP32 output gradient (in whatever layout the device needs, any shape) -> the backward GEMM
  // operand (the layer precision's cast_gradient), masked first by the ReLU mask given (dy's
  // shape, or nullptr); called once per chunk of samples. known_amax: the amax of the (masked)
  // gradient when the device found it on the way (the bias gradient's pass), else < 0.
  std::function<Tensor(const Tensor&, const Tensor*, float known_amax)> cast_dy;
  Tensor* dx = nullptr;  // (B, C, H, W) FP32, written; nullptr: no input gradient (the model's first layer)
  Tensor* dw = nullptr;  // (O, C*k*k) FP32 +=
  Tensor* db = nullptr;  // (O) FP32 +=; nullptr: no bias
  // (B, O, OH, OW) uint8 0/1 or nullptr: dy is the output gradient of the ReLU fused into the
  // forward (ConvEpilogue), whose backward is deferred to here: the convolution's gradient is dy
  // where the mask is 1, +0 elsewhere (read on the fly where the device can, else masked first).
  const Tensor* relu_mask = nullptr;
  // BF16 or FP16 when cast_dy is a plain conversion of the (masked) gradient to it
  // (gradient_conversion): the device may convert in its own pass over dy and skip cast_dy. FP32:
  // cast_dy only.
  Precision dy_conversion = Precision::FP32;
};

// Host-visible results (valid after synchronize()).
struct XentSums {
  double loss_sum = 0;  // sum over positions of -log p(target)
  int64_t correct = 0;  // positions with argmax == target (first maximum on ties)
};
struct OptimizerStepResult {
  double grad_norm = 0;  // global L2 norm of the (unscaled) gradients, when computed
  bool skipped = false;  // a non-finite gradient skipped the update (loss scaling)
};

struct Parameter;  // worker/layer.h

// One parameter of an optimizer step.
struct OptimizerSlot {
  Tensor* value = nullptr;      // FP32 master weights, updated
  const Tensor* grad = nullptr; // FP32 gradient (scaled by the loss scale)
  Tensor* m = nullptr;          // momentum (SGD) or first moment (AdamW)
  Tensor* v = nullptr;          // second moment (AdamW), else nullptr
  bool decay = true;
  // value's Parameter: where its forward asks for a per-row INT8 copy made ahead (int8_rows_qmax
  // > 0), a device that can makes it from the updated rows (Parameter::int8_rows); nullptr: none.
  Parameter* parameter = nullptr;
  MemoryAccount* memory = nullptr;  // where such a copy is accounted
};
// The update rules of worker/optimizer.h (PyTorch's formulas), their values for this step.
struct OptimizerUpdate {
  bool adamw = true;
  float lr = 0, weight_decay = 0;
  float momentum = 0.9f;  // SGD
  bool first_update = false;  // SGD: the momentum buffer starts as the gradient
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float bias_correction1 = 1, bias_correction2 = 1;  // AdamW: 1 - beta^t
  double grad_clip = 0;   // max global L2 norm; 0: no clipping (and no norm unless skipping)
  float inv_loss_scale = 1.0f;  // gradients are multiplied by it (exact: a power of two)
  bool skip_nonfinite = false;  // loss scaling: a non-finite gradient norm skips the update
  int64_t step = -1;  // the training step updating (copies made ahead serve the forward of step + 1)
};

// A point in an ops' timeline, for op timings (CpuOps: host seconds; CudaOps: an event).
struct TimeMark {
  double host_seconds = 0;
  int event = -1;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda"
  virtual Device device() const = 0;

  // ---- memory -----------------------------------------------------------------------------
  Tensor empty(const Shape& s, Precision p, MemoryAccount* account, const std::string& what) const {
    return Tensor::empty(s, p, account, what, device());
  }
  // mask ? dy : +0 into a new FP32 tensor: a fused ReLU's backward where a cast cannot read the
  // mask on the fly (relu_backward into a fresh tensor).
  Tensor relu_masked_copy(const Tensor& dy, const Tensor& mask, MemoryAccount* account, const std::string& what) {
    Tensor out = empty(dy.shape(), Precision::FP32, account, what);
    relu_backward(dy, mask, out);
    return out;
  }
  Tensor zeros(const Shape& s, Precision p, MemoryAccount* account, const std::string& what) {
    Tensor t = empty(s, p, account, what);
    fill_zero(t);
    return t;
  }
  virtual void fill_zero(Tensor& t) = 0;
  // dst = src, byte for byte (equal byte sizes); each on the host or this device.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // Waits for every op enqueued so far, delivers the host-visible results and op timings, and
  // throws the first deferred error (e.g. a token id out of range, with its position).
  virtual void synchronize() = 0;

  // ---- timing -----------------------------------------------------------------------------
  virtual TimeMark time_mark() = 0;
  // Records end - start under `op` in `timer` (CudaOps: at the next synchronize()).
  virtual void record_time(OpTimer& timer, const std::string& op, const TimeMark& start, const TimeMark& end) = 0;

  // ---- GEMMs ------------------------------------------------------------------------------
  // C (m, n) FP32 = op(A) op(B) (+ options), A and B 2-D views ((rows, cols) = the leading
  // product and the last dim), scales from the tensors (per tensor, or per channel along the
  // output: rows of op(A), columns of op(B)). FP32 operands compute in strict FP32, TF32 ones
  // on TF32 tensor cores (emulated where there are none).
  virtual void matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& c,
                      const MatmulOptions& o) = 0;
  // Whether this device's GEMMs on operands of precision p want both operands k-contiguous
  // (a stored (m, k) untransposed, b stored (n, k) transposed: cuBLASLt's "TN" for INT8/FP8).
  // Other layouts still work (the device transposes), at one more pass over the operand.
  virtual bool gemm_wants_k_contiguous(Precision p) const = 0;
  // The largest INT8 magnitude of an A operand (CPUs without VNNI: 63, see
  // kernels/cpu/gemm_onednn.h cpu_int8_activation_max; CUDA: 127). B operands use 127.
  virtual int int8_a_operand_max() const = 0;

  // ---- precision casts (the primitives of worker/precision_ops.h) --------------------------
  // FP32 -> BF16 / FP16 storage, or back (round to nearest even, saturating).
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  // x (FP32) rounded to the 16-bit format p and back, in place.
  virtual void round_to_sixteen_bit(Tensor& x, Precision p) = 0;
  // q (INT8, x's shape) = quantized x, with q.scales set; q_transposed (optional, the 2-D
  // transpose of x's (rows, cols) view, per-tensor only) gets the same values and scale.
  virtual void quantize_int8(const Tensor& x, const Int8Quantization& spec, Tensor& q, Tensor* q_transposed) = 0;
  // q (FP8_E4M3 / FP8_E5M2) = x / scale, scale = amax / max_finite, per tensor; q.scales set.
  virtual void quantize_fp8(const Tensor& x, Tensor& q, Tensor* q_transposed) = 0;
  // out = q * scale (per tensor or per row), stored as BF16/FP16 (out's precision), or as FP32
  // holding values rounded to `round_to` (BF16/FP16; FP32: no rounding).
  virtual void dequantize_int8(const Tensor& q, Tensor& out, Precision round_to) = 0;
  // dst (cols, rows) = src (rows, cols) for 1-, 2- and 4-byte elements; per-tensor scales follow.
  virtual void transpose(const Tensor& src, Tensor& dst) = 0;

  // ---- elementwise --------------------------------------------------------------------------
  virtual void relu_forward(const Tensor& x, Tensor& y, Tensor* mask) = 0;    // mask: uint8 0/1
  virtual void relu_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) = 0;
  // The same with dx in BF16 or FP16: dx = convert(mask ? dy : +0), without an FP32 copy.
  virtual void relu_backward_convert(const Tensor& dy, const Tensor& mask, Tensor& dx) = 0;
  // Exact erf GELU, y = x Phi(x); in training also its derivative at x, dydx = Phi(x) + x phi(x)
  // (both come from one pass over x), which the backward multiplies in: dx = dy * dydx.
  virtual void gelu_forward(const Tensor& x, Tensor& y, Tensor* dydx) = 0;
  virtual void gelu_backward(const Tensor& dydx, const Tensor& dy, Tensor& dx) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // Inverted dropout: element i kept when hash_to_unit(counter_hash(key, i)) >= p, scaled 1/(1-p).
  virtual void dropout_forward(const Tensor& x, double p, uint64_t key, Tensor& y, Tensor& mask) = 0;
  virtual void dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) = 0;
  // Per sample: dst (B, cols, rows) = src (B, rows, cols) transposed.
  virtual void transpose_batched(const Tensor& src, Tensor& dst, int64_t batch, int64_t rows, int64_t cols) = 0;
  // y (B, N) = x (B, N) + table (N), table broadcast over the batch.
  virtual void add_broadcast(const Tensor& x, const Tensor& table, Tensor& y) = 0;
  // table (N) += sum over b of dy (B, N), b in order.
  virtual void sum_batch_into(const Tensor& dy, Tensor& table) = 0;
  // db (N) += sum over rows of dy (M, N) in kernels/column_sum_order.h's order (a Linear's bias
  // gradient).
  virtual void bias_grad_rows(const Tensor& dy, Tensor& db) = 0;

  // ---- layers ---------------------------------------------------------------------------------
  // y, xhat (rows, C); rstd (rows); xhat and rstd may be nullptr (eval).
  virtual void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                                 Tensor* xhat, Tensor* rstd) = 0;
  // dx written; dw, db +=.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& xhat, const Tensor& rstd, const Tensor& w,
                                  Tensor& dx, Tensor& dw, Tensor& db) = 0;
  // ids (B, T) int32 = x (B, T) token ids as floats; a non-integer or one outside [0, vocab)
  // is an error naming the layer and the first bad position (CudaOps: at synchronize()).
  virtual void embedding_ids(const Tensor& x, int64_t vocab, Tensor& ids, const std::string& layer) = 0;
  // y (B, T, C) = wte[ids] + wpe[t]
  virtual void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, Tensor& y) = 0;
  // dwte[ids[b, t]] += dy[b, t] in (b, t) order; dwpe[t] += sum_b dy[b, t]
  virtual void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dwte, Tensor& dwpe) = 0;
  // y (B, C, OH, OW); argmax (same shape, int32 index into the (H, W) plane) or nullptr.
  virtual void maxpool_forward(const Tensor& x, const PoolGeometry& g, Tensor& y, Tensor* argmax) = 0;
  virtual void maxpool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, Tensor& dx) = 0;
  // Mean over positions: images x (B, C, N) (tokens false) or tokens x (B, N, C) -> y (B, C).
  virtual void avgpool_forward(const Tensor& x, int64_t channels, int64_t positions, bool tokens, Tensor& y) = 0;
  virtual void avgpool_backward(const Tensor& dy, int64_t channels, int64_t positions, bool tokens, Tensor& dx) = 0;
  // qkv (B, T, 3C) -> att (B, H, T, T) probabilities, out (B, T, C). The score products run in
  // FP32; with allow_tf32 a device with TF32 tensor cores may run them there (the layer allows it
  // when its projections are below fp32).
  virtual void attention_forward(const Tensor& qkv, const AttentionShape& s, bool allow_tf32, Tensor& att,
                                 Tensor& out, StepContext& ctx, const std::string& layer) = 0;
  // dqkv (B, T, 3C) written from dout (B, T, C); att as attention_forward wrote it (exact zeros
  // where a causal row does not see a token: CpuOps' blocked products add those zeros).
  virtual void attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s,
                                  bool allow_tf32, Tensor& dqkv, StepContext& ctx, const std::string& layer) = 0;
  // y (B, O, OH, OW) FP32 = epilogue(conv(xc (B, C, H, W), wc (O, C*k*k)) + bias (O, optional)); xc
  // and wc in one precision (INT8 / FP8 with scales). Sub-ops are timed as "<layer>.<op>" in ctx.timer.
  virtual void conv2d_forward(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                              const ConvEpilogue& epilogue, Tensor& y, StepContext& ctx, const std::string& layer) = 0;
  virtual void conv2d_backward(const Conv2dBackward& a, const ConvGeometry& g, StepContext& ctx,
                               const std::string& layer) = 0;
  // Whether conv2d_forward of these operands (cast as the layer's precision casts them) runs a
  // ConvEpilogue::pool: a pooling in the output pass, where it saves writing and reading the output.
  virtual bool conv2d_forward_pools(const Tensor& xc, const Tensor& wc, const ConvGeometry& g) const = 0;
  // Whether conv2d_backward reads Conv2dBackward::relu_mask on the fly (in the bias gradient and
  // the casts that allow it) rather than masking dy into a copy first (no gain: the ReLU's own
  // backward then runs instead).
  virtual bool conv_backward_reads_relu_mask() const = 0;

  // ---- loss and optimizer -------------------------------------------------------------------
  // logits (P, V) rows; targets (P) int32 in [0, V) (checked by the caller); dlogits (P, V) =
  // (softmax - onehot) * grad_scale / loss_divisor; sums: see XentSums.
  virtual void softmax_xent(const Tensor& logits, const Tensor& targets, float loss_divisor, float grad_scale,
                            Tensor& dlogits, XentSums* sums) = 0;
  // Clipping (global norm in double, slots in order), then the update of every slot.
  virtual void optimizer_step(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u,
                              OptimizerStepResult* result) = 0;
  // Whether optimizer_step rewrites a slot's Parameter::int8_rows in its pass over the updated
  // rows (OptimizerSlot::parameter), so the next forward need not cast the weights.
  virtual bool optimizer_makes_int8_rows() const { return false; }
};

// The host implementation (one per process; stateless).
DeviceOps& cpu_ops();

}  // namespace qsync
