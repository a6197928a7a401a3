// File: worker/loss.h
// Softmax cross-entropy, numerically stable (max-subtracted log-sum-exp), for the two heads of
// the engine:
//   classification  logits (B, C),    targets: B class ids
//   language model  logits (B, T, V), targets: B * T token ids, position (b, t) at b * T + t
// A position is one row of the last dimension; P = numel / last dim positions.
//
// Convention: the caller chooses the divisor. With d = loss_divisor,
//   loss     = sum over positions of -log softmax(row)[target] / d
//   dlogits  = (softmax(row) - onehot(target)) / d          (same shape as logits)
// d = P gives the mean over this rank's positions (the usual single-process loss). In data-parallel
// training pass the global count (global batch * T) so that summing the ranks' gradients gives the
// gradient of the global mean. loss_sum (undivided, double) is there to aggregate across ranks.
// `correct` counts positions whose argmax (first maximum on ties) equals the target.
// Targets outside [0, last dim) and loss_divisor <= 0 throw std::invalid_argument.
// Rows are computed in parallel; the sums run in position order, so results do not depend on
// the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/tensor.h"

namespace qsync {

struct SoftmaxXentResult {
  float loss = 0.0f;      // loss_sum / loss_divisor
  double loss_sum = 0.0;  // sum over positions of -log p(target)
  int64_t correct = 0;    // positions with argmax == target
  int64_t positions = 0;  // P
  Tensor dlogits;         // shape of logits, FP32, charged to the account
};

SoftmaxXentResult softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                                        float loss_divisor, MemoryAccount* memory);

}  // namespace qsync
