// File: worker/loss.cpp
// Softmax cross-entropy over the last dimension (see loss.h for the divisor convention).
#include "worker/loss.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace qsync {

SoftmaxXentResult softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                                        float loss_divisor, MemoryAccount* memory) {
  if (logits.rank() != 2 && logits.rank() != 3)
    throw std::invalid_argument("softmax_cross_entropy: logits must be (B, C) or (B, T, V), got rank " +
                                std::to_string(logits.rank()));
  if (!(loss_divisor > 0.0f))
    throw std::invalid_argument("softmax_cross_entropy: loss_divisor must be > 0, got " +
                                std::to_string(loss_divisor));
  const int64_t V = logits.dim(logits.rank() - 1);
  const int64_t P = V > 0 ? logits.numel() / V : 0;  // positions
  if (int64_t(targets.size()) != P)
    throw std::invalid_argument("softmax_cross_entropy: " + std::to_string(targets.size()) + " targets for " +
                                std::to_string(P) + " positions");
  for (int64_t i = 0; i < P; ++i)
    if (targets[size_t(i)] < 0 || targets[size_t(i)] >= V)
      throw std::invalid_argument("softmax_cross_entropy: target " + std::to_string(targets[size_t(i)]) +
                                  " at position " + std::to_string(i) + " is outside [0, " + std::to_string(V) +
                                  ")");

  SoftmaxXentResult r;
  r.positions = P;
  r.dlogits = Tensor::empty(logits.shape(), Precision::FP32, memory, "dlogits");  // (B, [T,] V)
  const float* lp = logits.f32();
  float* gp = r.dlogits.f32();
  std::vector<double> row_loss(size_t(P), 0.0);
  std::vector<uint8_t> row_correct(size_t(P), 0);
  const float inv_divisor = 1.0f / loss_divisor;

#pragma omp parallel for if (logits.numel() > (1 << 14))
  for (int64_t i = 0; i < P; ++i) {
    const float* row = lp + i * V;  // (V)
    float* grow = gp + i * V;       // (V)
    const int32_t target = targets[size_t(i)];
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

  for (int64_t i = 0; i < P; ++i) {
    r.loss_sum += row_loss[size_t(i)];
    r.correct += row_correct[size_t(i)];
  }
  r.loss = float(r.loss_sum / double(loss_divisor));
  return r;
}

}  // namespace qsync
