// File: worker/ops/cuda/cuda_ops_layers.cpp
// CudaOps: elementwise ops, layer norm, embeddings, pooling, the fused loss and the optimizer
// step, each on its kernel of kernels/cuda/.
#include <cuda_runtime.h>

#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/layout_cuda.h"
#include "kernels/cuda/norm_cuda.h"
#include "kernels/cuda/optimizer_cuda.h"
#include "kernels/cuda/pool_cuda.h"
#include "kernels/cuda/softmax_xent_cuda.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

int64_t batch_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(0); }
Pool2dShape pool_shape(const PoolGeometry& g) { return {g.c, g.h, g.w, g.kernel, g.stride, g.pad, g.oh, g.ow}; }
float dropout_scale(double p) { return p < 1.0 ? float(1.0 / (1.0 - p)) : 0.0f; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Elementwise

void CudaOps::relu_forward(const Tensor& x, Tensor& y, Tensor* mask) {
  relu_forward_cuda(x.as<float>(), y.as<float>(), mask ? mask->as<uint8_t>() : nullptr, x.numel(), stream_);
}
void CudaOps::relu_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  relu_backward_cuda(dy.as<float>(), mask.as<uint8_t>(), dx.as<float>(), dy.numel(), stream_);
}
void CudaOps::gelu_forward(const Tensor& x, Tensor& y, Tensor* dydx) {
  gelu_forward_cuda(x.as<float>(), y.as<float>(), dydx != nullptr ? dydx->as<float>() : nullptr, x.numel(), stream_);
}
void CudaOps::gelu_backward(const Tensor& dydx, const Tensor& dy, Tensor& dx) {
  gelu_backward_cuda(dydx.as<float>(), dy.as<float>(), dx.as<float>(), dy.numel(), stream_);
}
void CudaOps::add(const Tensor& a, const Tensor& b, Tensor& out) {
  add_cuda(a.as<float>(), b.as<float>(), out.as<float>(), a.numel(), stream_);
}
void CudaOps::dropout_forward(const Tensor& x, double p, uint64_t key, Tensor& y, Tensor& mask) {
  dropout_forward_cuda(x.as<float>(), y.as<float>(), mask.as<uint8_t>(), x.numel(), p, key, dropout_scale(p), stream_);
}
void CudaOps::dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) {
  dropout_backward_cuda(dy.as<float>(), mask.as<uint8_t>(), dx.as<float>(), dy.numel(), dropout_scale(p), stream_);
}
void CudaOps::transpose_batched(const Tensor& src, Tensor& dst, int64_t batch, int64_t rows, int64_t cols) {
  transpose_cuda(src.data(), dst.data(), batch, rows, cols, 4, stream_);
}
void CudaOps::add_broadcast(const Tensor& x, const Tensor& table, Tensor& y) {
  add_broadcast_cuda(x.as<float>(), table.as<float>(), y.as<float>(), batch_of(x), table.numel(), stream_);
}
void CudaOps::sum_batch_into(const Tensor& dy, Tensor& table) {
  sum_batch_into_cuda(dy.as<float>(), table.as<float>(), batch_of(dy), table.numel(), stream_);
}
void CudaOps::bias_grad_rows(const Tensor& dy, Tensor& db) {
  const int64_t n = db.numel(), rows = n > 0 ? dy.numel() / n : 0;
  Tensor partial = scratch(std::max<int64_t>(1, column_sum_scratch_floats(rows, n)) * 4, "bias gradient partials");
  bias_grad_rows_cuda(dy.as<float>(), db.as<float>(), rows, n, partial.as<float>(), stream_);
}

// ---------------------------------------------------------------------------------------------
// Layer norm

void CudaOps::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor* xhat,
                                Tensor* rstd) {
  const int64_t C = w.numel(), rows = x.numel() / C;
  layernorm_forward_cuda(x.as<float>(), w.as<float>(), b.as<float>(), rows, C, eps, y.as<float>(),
                         xhat ? xhat->as<float>() : nullptr, rstd ? rstd->as<float>() : nullptr, stream_);
}

void CudaOps::layernorm_backward(const Tensor& dy, const Tensor& xhat, const Tensor& rstd, const Tensor& w, Tensor& dx,
                                 Tensor& dw, Tensor& db) {
  const int64_t C = w.numel(), rows = dy.numel() / C;
  Tensor partial = scratch(layernorm_backward_scratch_floats(rows, C) * 4, "layer norm partials");
  layernorm_backward_cuda(dy.as<float>(), xhat.as<float>(), rstd.as<float>(), w.as<float>(), rows, C, dx.as<float>(),
                          dw.as<float>(), db.as<float>(), partial.as<float>(), stream_);
}

// ---------------------------------------------------------------------------------------------
// Embedding: a bad id is found on the device and reported at the step's synchronize(), with the
// CPU's message (the value is read back from the input then).

void CudaOps::embedding_ids(const Tensor& x, int64_t vocab, Tensor& ids, const std::string& layer) {
  const int64_t T = x.rank() > 1 ? x.dim(1) : 1, n = x.numel();
  Tensor first_bad = scratch(8, "first bad token");
  QSYNC_CUDA_CHECK(cudaMemsetAsync(first_bad.data(), 0xff, 8, static_cast<cudaStream_t>(stream_)));
  embedding_ids_cuda(x.as<float>(), ids.as<int32_t>(), n, vocab, static_cast<unsigned long long*>(first_bad.data()),
                     stream_);
  const Tensor input = x;  // kept alive until the check: the message quotes the bad value
  on_host(first_bad.data(), 8, [input, vocab, T, layer](const void* p) {
    unsigned long long i = 0;
    std::memcpy(&i, p, sizeof i);
    if (i == ULLONG_MAX) return;
    const Tensor host = tensor_to_host(input);
    const float v = host.f32()[i];
    throw std::invalid_argument("layer '" + layer + "': token id " + std::to_string(v) + " at (batch " +
                                std::to_string(int64_t(i) / T) + ", position " + std::to_string(int64_t(i) % T) +
                                ") is not an integer in [0, " + std::to_string(vocab) +
                                "); check the data's vocabulary against the model's input.vocab");
  });
}

void CudaOps::embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, Tensor& y) {
  embedding_forward_cuda(ids.as<int32_t>(), wte.as<float>(), wpe.as<float>(), y.as<float>(), ids.dim(0), ids.dim(1),
                         wpe.dim(1), stream_);
}

void CudaOps::embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dwte, Tensor& dwpe) {
  const int64_t B = ids.dim(0), T = ids.dim(1), C = dwpe.dim(1), vocab = dwte.dim(0);
  const size_t bytes = embedding_backward_scratch_bytes(B * T, vocab);
  Tensor s = scratch(int64_t(bytes), "embedding gradient sort");
  embedding_backward_cuda(dy.as<float>(), ids.as<int32_t>(), B, T, C, vocab, dwte.as<float>(), dwpe.as<float>(), s.data(),
                          bytes, stream_);
}

// ---------------------------------------------------------------------------------------------
// Pooling

void CudaOps::maxpool_forward(const Tensor& x, const PoolGeometry& g, Tensor& y, Tensor* argmax) {
  maxpool_forward_cuda(x.as<float>(), y.as<float>(), argmax ? argmax->as<int32_t>() : nullptr, x.dim(0), pool_shape(g),
                       stream_);
}
void CudaOps::maxpool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, Tensor& dx) {
  maxpool_backward_cuda(dy.as<float>(), argmax.as<int32_t>(), dx.as<float>(), dy.dim(0), pool_shape(g), stream_);
}
void CudaOps::avgpool_forward(const Tensor& x, int64_t channels, int64_t positions, bool tokens, Tensor& y) {
  avgpool_forward_cuda(x.as<float>(), y.as<float>(), x.dim(0), channels, positions, tokens, stream_);
}
void CudaOps::avgpool_backward(const Tensor& dy, int64_t channels, int64_t positions, bool tokens, Tensor& dx) {
  avgpool_backward_cuda(dy.as<float>(), dx.as<float>(), dy.dim(0), channels, positions, tokens, stream_);
}

// ---------------------------------------------------------------------------------------------
// Loss: per-row losses and hits on the device, their sums delivered at synchronize().

void CudaOps::softmax_xent(const Tensor& logits, const Tensor& targets, float loss_divisor, float grad_scale,
                           Tensor& dlogits, XentSums* sums) {
  const int64_t V = logits.shape().back(), P = V > 0 ? logits.numel() / V : 0;
  Tensor rows = scratch(P * 8 + P + 16, "loss rows");  // doubles, then hits
  auto* row_loss = rows.as<double>();
  auto* row_correct = reinterpret_cast<uint8_t*>(row_loss + P);
  Tensor totals = scratch(16, "loss sums");  // double loss_sum, long long correct: XentSums' layout
  const float scale = (1.0f / loss_divisor) * grad_scale;
  softmax_xent_rows_cuda(logits.as<float>(), targets.as<int32_t>(), P, V, scale, dlogits.as<float>(), row_loss,
                         row_correct, stream_);
  softmax_xent_sums_cuda(row_loss, row_correct, P, totals.as<double>(), reinterpret_cast<long long*>(totals.as<double>() + 1),
                         stream_);
  static_assert(sizeof(XentSums) == 16 && sizeof(int64_t) == sizeof(long long), "XentSums is (double, int64)");
  if (sums != nullptr) deliver_to_host(totals.data(), 16, sums);
}

// ---------------------------------------------------------------------------------------------
// Optimizer: the device tables are built once for a set of slots (the optimizer's, every step).

void CudaOps::optimizer_step(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u,
                             OptimizerStepResult* result) {
  std::vector<CudaOptimizerSlot> s;
  for (const OptimizerSlot& slot : slots) {
    require_here(*slot.value, "optimizer_step");
    s.push_back({slot.value->as<float>(), slot.grad->as<float>(), slot.m->as<float>(),
                 slot.v ? slot.v->as<float>() : nullptr, slot.value->numel(), slot.decay});
  }
  if (!optimizer_ || !optimizer_->same_slots(s)) optimizer_ = std::make_unique<CudaOptimizerKernels>(s);
  CudaOptimizerHyper h;
  h.adamw = u.adamw;
  h.lr = u.lr;
  h.weight_decay = u.weight_decay;
  h.momentum = u.momentum;
  h.first_update = u.first_update;
  h.beta1 = u.beta1;
  h.beta2 = u.beta2;
  h.eps = u.eps;
  h.bias_correction1 = u.bias_correction1;
  h.bias_correction2 = u.bias_correction2;
  h.grad_clip = u.grad_clip;
  h.inv_loss_scale = u.inv_loss_scale;
  h.skip_nonfinite = u.skip_nonfinite;
  Tensor out = scratch(sizeof(CudaOptimizerResult), "optimizer result");
  optimizer_->step(h, out.as<CudaOptimizerResult>(), stream_);
  if (result != nullptr)
    on_host(out.data(), sizeof(CudaOptimizerResult), [result](const void* p) {
      CudaOptimizerResult r;
      std::memcpy(&r, p, sizeof r);
      result->grad_norm = r.grad_norm;
      result->skipped = r.skipped != 0;
    });
}

}  // namespace qsync
