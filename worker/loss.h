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
// the thread count. With loss scaling, dlogits is multiplied by the (power of two) loss scale.
//
// The computation is one op of the rank's ops (DeviceOps::softmax_xent): on a device the sums
// reach the host at the step's synchronize(), so the device form fills a result in two calls.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/ops/device_ops.h"
#include "worker/tensor.h"

namespace qsync {

struct SoftmaxXentResult {
  float loss = 0.0f;      // loss_sum / loss_divisor
  double loss_sum = 0.0;  // sum over positions of -log p(target)
  int64_t correct = 0;    // positions with argmax == target
  int64_t positions = 0;  // P
  Tensor dlogits;         // shape of logits, FP32, charged to the account, on the logits' device
  // Where the ops deliver the sums (a stable address until settle()).
  XentSums sums;
  float divisor = 1.0f;
  // Copies the delivered sums into loss_sum, correct and loss (after the ops' synchronize()).
  void settle();
};

// Host tensors, at once: the result is complete on return.
SoftmaxXentResult softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                                        float loss_divisor, MemoryAccount* memory);

// Throws std::invalid_argument when the targets do not fit logits of shape `logits_shape`
// (count, range) or the divisor is not positive: the checks of softmax_cross_entropy.
void softmax_cross_entropy_check(const Shape& logits_shape, const std::vector<int32_t>& targets, float loss_divisor);

// Any device: `targets` (P) int32 already on the logits' device (checked by the caller with
// softmax_cross_entropy_check on the host copy). Fills out.dlogits now, out.sums at the ops'
// synchronize(); then call out.settle().
void softmax_cross_entropy_enqueue(DeviceOps& ops, const Tensor& logits, const Tensor& targets, float loss_divisor,
                                   float grad_scale, MemoryAccount* memory, SoftmaxXentResult& out);

}  // namespace qsync
