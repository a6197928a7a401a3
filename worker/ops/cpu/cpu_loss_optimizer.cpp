// File: worker/ops/cpu/cpu_loss_optimizer.cpp
// CpuOps: fused softmax + cross-entropy (forward and its gradient in one pass over the logits),
// and the optimizer step (canonical global norm, clipping, SGD / AdamW updates).
#include <cmath>
#include <vector>

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
    const int64_t n = s.value->numel();
    const float decay = s.decay ? wd : 0.0f;
    if (!u.adamw) {
      const float mom = u.momentum;
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] * factor + decay * w[i];
        m[i] = u.first_update ? gi : mom * m[i] + gi;
        w[i] -= lr * m[i];
      }
    } else {
      float* v = s.v->f32();
      const float b1 = u.beta1, b2 = u.beta2, eps = u.eps;
      const float c1 = u.bias_correction1, c2 = u.bias_correction2;
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] * factor;
        w[i] -= lr * decay * w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
  }
  if (result != nullptr) *result = r;
}

}  // namespace qsync
