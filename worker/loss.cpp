// File: worker/loss.cpp
// Softmax cross-entropy over the last dimension (see loss.h for the divisor convention): the
// checks and the calls of the rank's ops.
#include "worker/loss.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace qsync {

void SoftmaxXentResult::settle() {
  loss_sum = sums.loss_sum;
  correct = sums.correct;
  loss = float(loss_sum / double(divisor));
}

void softmax_cross_entropy_check(const Shape& shape, const std::vector<int32_t>& targets, float loss_divisor) {
  if (shape.size() != 2 && shape.size() != 3)
    throw std::invalid_argument("softmax_cross_entropy: logits must be (B, C) or (B, T, V), got rank " +
                                std::to_string(shape.size()));
  if (!(loss_divisor > 0.0f))
    throw std::invalid_argument("softmax_cross_entropy: loss_divisor must be > 0, got " +
                                std::to_string(loss_divisor));
  const int64_t V = shape.back();
  const int64_t P = V > 0 ? shape_numel(shape) / V : 0;  // positions
  if (int64_t(targets.size()) != P)
    throw std::invalid_argument("softmax_cross_entropy: " + std::to_string(targets.size()) + " targets for " +
                                std::to_string(P) + " positions");
  for (int64_t i = 0; i < P; ++i)
    if (targets[size_t(i)] < 0 || targets[size_t(i)] >= V)
      throw std::invalid_argument("softmax_cross_entropy: target " + std::to_string(targets[size_t(i)]) +
                                  " at position " + std::to_string(i) + " is outside [0, " + std::to_string(V) +
                                  ")");
}

void softmax_cross_entropy_enqueue(DeviceOps& ops, const Tensor& logits, const Tensor& targets, float loss_divisor,
                                   float grad_scale, MemoryAccount* memory, SoftmaxXentResult& out) {
  const int64_t V = logits.shape().back();
  out.positions = V > 0 ? logits.numel() / V : 0;
  out.divisor = loss_divisor;
  out.sums = {};
  out.dlogits = ops.empty(logits.shape(), Precision::FP32, memory, "dlogits");  // (B, [T,] V)
  ops.softmax_xent(logits, targets, loss_divisor, grad_scale, out.dlogits, &out.sums);
}

SoftmaxXentResult softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                                        float loss_divisor, MemoryAccount* memory) {
  softmax_cross_entropy_check(logits.shape(), targets, loss_divisor);
  Tensor t = Tensor::empty({int64_t(targets.size())}, Precision::FP32, nullptr, "targets");  // int32
  if (!targets.empty()) std::memcpy(t.data(), targets.data(), targets.size() * sizeof(int32_t));
  SoftmaxXentResult r;
  softmax_cross_entropy_enqueue(cpu_ops(), logits, t, loss_divisor, 1.0f, memory, r);
  r.settle();
  return r;
}

}  // namespace qsync
