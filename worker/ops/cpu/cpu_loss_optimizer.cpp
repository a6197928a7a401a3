// File: worker/ops/cpu/cpu_loss_optimizer.cpp
// CpuOps: fused softmax + cross-entropy (forward and its gradient in one pass over the logits),
// and the optimizer step (canonical global norm, clipping, SGD / AdamW updates, and the per-row
// INT8 weight copies a forward asks to have made ahead).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/quantize.h"
#include "worker/layer.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {

void CpuOps::softmax_xent(const Tensor& logits, const Tensor& targets, float loss_divisor, float grad_scale,
                          Tensor& dlogits, XentSums* sums) {
  const int64_t V = logits.shape().back();
  const int64_t P = V > 0 ? logits.numel() / V : 0;  // positions
  const float* lp = logits.f32();
  float* gp = dlogits.f32();
  const int32_t* tp = targets.as<int32_t>();
  std::vector<double> row_loss(size_t(P), 0.0);
  std::vector<uint8_t> row_correct(size_t(P), 0);
  const float inv_divisor = (1.0f / loss_divisor) * grad_scale;

#pragma omp parallel for if (logits.numel() > (1 << 14))
  for (int64_t i = 0; i < P; ++i) {
    const float* row = lp + i * V;  // (V)
    float* grow = gp + i * V;       // (V)
    const int32_t target = tp[i];
    int64_t argmax = 0;
    float maxv = row[0];
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > maxv) {
        maxv = row[v];
        argmax = v;
      }
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const float e = std::exp(row[v] - maxv);
      grow[v] = e;
      sum += double(e);
    }
    // -log p(target) = log(sum exp(row - max)) - (row[target] - max)
    row_loss[size_t(i)] = std::log(sum) - double(row[target] - maxv);
    row_correct[size_t(i)] = argmax == target ? 1 : 0;
    const float inv_sum = float(1.0 / sum);
    for (int64_t v = 0; v < V; ++v) grow[v] = grow[v] * inv_sum * inv_divisor;
    grow[target] -= inv_divisor;
  }

  XentSums r;
  for (int64_t i = 0; i < P; ++i) {
    r.loss_sum += row_loss[size_t(i)];
    r.correct += row_correct[size_t(i)];
  }
  if (sums != nullptr) *sums = r;
}

namespace {

// Pieces of the optimizer's elementwise updates, spread over the threads.
constexpr int64_t UPDATE_GRAIN = 1 << 14;

// PyTorch's SGD with momentum (dampening 0) over [b, e): m = first ? g' : mom * m + g';
// w -= lr * m, with g' = g * factor + decay * w.
void sgd_range(float* __restrict w, const float* __restrict g, float* __restrict m, int64_t b, int64_t e, float factor,
               float decay, float lr, float mom, bool first) {
  if (first) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float gi = g[i] * factor + decay * w[i];
      m[i] = gi;
      w[i] -= lr * gi;
    }
  } else {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float gi = g[i] * factor + decay * w[i];
      const float mi = mom * m[i] + gi;
      m[i] = mi;
      w[i] -= lr * mi;
    }
  }
}

// PyTorch's AdamW (decoupled weight decay, bias-corrected moments) over [b, e).
void adamw_range(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t b,
                 int64_t e, float factor, float decay, const OptimizerUpdate& u) {
  const float lr = u.lr, b1 = u.beta1, b2 = u.beta2, eps = u.eps;
  const float c1 = u.bias_correction1, c2 = u.bias_correction2;
#pragma omp simd
  for (int64_t i = b; i < e; ++i) {
    const float gi = g[i] * factor;
    float wi = w[i];
    wi -= lr * decay * wi;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - lr * (mi / c1) / (std::sqrt(vi / c2) + eps);
  }
}

// The (rows, cols) INT8 tensor (value's 2-D shape) for the copy a slot's parameter asks the update to make
// (Parameter::int8_rows), or undefined: the previous copy, rewritten in place once its layer's
// backward has let go of it (no allocation in the steady state), else a new one.
Tensor int8_rows_copy_for(const OptimizerSlot& s) {
  const Parameter* param = s.parameter;
  if (param == nullptr || param->int8_rows_qmax <= 0 || s.value->rank() != 2 || s.value->numel() == 0) return Tensor();
  const Tensor& last = param->int8_rows;  // the forward's own cast: value's shape
  if (last.sole_owner() && last.on_host() && last.shape() == s.value->shape()) return last;
  return Tensor::empty(s.value->shape(), Precision::INT8, s.memory, param->name + " (int8, made by the optimizer)");
}

// One slot's update, in pieces over the threads (elementwise: the same bits at any split).
// With a copy to make (int8_rows_copy_for) the pieces are the rows: each row updated, then its
// amax and its INT8 values while it is in cache, which are the bits cast_weight would compute
// from the updated tensor (amax_rows, int8_scale_from_amax, quantize_int8_rows with round to
// nearest even).
template <class Update>
void update_slot(const OptimizerSlot& s, Tensor q, int64_t step, Update update) {
  const int64_t n = s.value->numel();
  if (!q.defined()) {
#pragma omp parallel for schedule(static) if (n > 2 * UPDATE_GRAIN)
    for (int64_t b = 0; b < n; b += UPDATE_GRAIN) update(b, std::min(n, b + UPDATE_GRAIN));
    return;
  }
  Parameter* param = s.parameter;
  const int qmax = param->int8_rows_qmax;
  const int64_t rows = q.dim(0), cols = q.dim(1);
  std::vector<float> scales(static_cast<size_t>(rows));
  const float* w = s.value->f32();
  int8_t* qp = q.as<int8_t>();
#pragma omp parallel for schedule(static) if (n > 2 * UPDATE_GRAIN)
  for (int64_t r = 0; r < rows; ++r) {
    update(r * cols, (r + 1) * cols);
    // amax and quantize_int8 of one row: the row's values of amax_rows and quantize_int8_rows
    // (below 2^16 columns these run no parallel region of their own; above, theirs nest inactive)
    scales[size_t(r)] = int8_scale_from_amax(amax(w + r * cols, cols), qmax);
    quantize_int8(w + r * cols, qp + r * cols, cols, scales[size_t(r)], Rounding::NEAREST_EVEN, 0);
  }
  q.scale_mode = ScaleMode::PER_CHANNEL;
  q.scales = Tensor::host_scales(scales);
  param->int8_rows = std::move(q);
  param->int8_rows_step = step + 1;
}

}  // namespace

void CpuOps::optimizer_step(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u,
                            OptimizerStepResult* result) {
  OptimizerStepResult r;
  const bool need_norm = u.grad_clip > 0 || u.skip_nonfinite;
  if (need_norm) {
    double sq = 0.0;  // per slot the canonical tree, slots in order: the same bits on every device
    for (const OptimizerSlot& s : slots) sq += canonical_sum_of_squares(s.grad->f32(), s.grad->numel());
    r.grad_norm = std::sqrt(sq) * double(u.inv_loss_scale);
  }
  if (u.skip_nonfinite && !std::isfinite(r.grad_norm)) {
    r.skipped = true;
    if (result != nullptr) *result = r;
    return;
  }
  const double norm = r.grad_norm;
  const float clip = u.grad_clip > 0 && norm > u.grad_clip ? float(u.grad_clip / (norm + 1e-6)) : 1.0f;
  const float factor = clip * u.inv_loss_scale;  // exact: the loss scale is a power of two
  const float lr = u.lr, wd = u.weight_decay;
  for (const OptimizerSlot& s : slots) {
    float* w = s.value->f32();
    const float* g = s.grad->f32();
    float* m = s.m->f32();
    const float decay = s.decay ? wd : 0.0f;
    // Elementwise: threads and vector lanes over elements give the same bits as one loop.
    if (!u.adamw) {
      update_slot(s, int8_rows_copy_for(s), u.step,
                  [&](int64_t b, int64_t e) { sgd_range(w, g, m, b, e, factor, decay, lr, u.momentum, u.first_update); });
    } else {
      float* v = s.v->f32();
      update_slot(s, int8_rows_copy_for(s), u.step,
                  [&](int64_t b, int64_t e) { adamw_range(w, g, m, v, b, e, factor, decay, u); });
    }
  }
  if (result != nullptr) *result = r;
}

}  // namespace qsync
