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

// One piece of the step's updates: elements [begin, end) of a slot's value, whole rows where the
// slot makes an INT8 copy.
struct UpdatePiece {
  int64_t slot, begin, end;
};

// A slot of more elements than this updates in pieces of UPDATE_GRAIN (or single rows) split
// evenly over the threads, the halves of the rows its gradient's GEMM wrote; the smaller slots
// (a model's biases, norms and narrow projections) go over the threads together, in pieces of
// SMALL_PIECE, in one loop: each would otherwise run alone on the caller's thread.
constexpr int64_t UPDATE_GRAIN = 1 << 14;
constexpr int64_t LARGE_SLOT = 2 * UPDATE_GRAIN;
constexpr int64_t SMALL_PIECE = 1 << 12;

// The pieces of slot `index` (n elements; rows of `cols` when it makes an INT8 copy, else 0), a
// row or `grain` elements at least.
void add_pieces(int64_t index, int64_t n, int64_t cols, int64_t grain, std::vector<UpdatePiece>& pieces) {
  const int64_t step = cols > 0 ? std::max<int64_t>(1, grain / cols) * cols : grain;
  for (int64_t b = 0; b < n; b += step) pieces.push_back({index, b, std::min(n, b + step)});
}

// A slot's INT8 copy as it is being made: the rows' scales, filled by their pieces.
struct Int8RowsCopy {
  Tensor q;
  std::vector<float> scales, amaxes;  // per row
};

// Elementwise updates: threads and vector lanes over elements give the same bits as one loop.
// With a copy to make (int8_rows_copy_for) the pieces are whole rows: each row updated, then its
// amax and its INT8 values while it is in cache, which are the bits cast_weight would compute
// from the updated tensor (amax_rows, int8_scale_from_amax, quantize_int8_rows with round to
// nearest even).
void update_piece(const OptimizerSlot& s, Int8RowsCopy& c, const UpdatePiece& piece, const OptimizerUpdate& u,
                  float factor) {
  float* w = s.value->f32();
  const float decay = s.decay ? u.weight_decay : 0.0f;
  if (!u.adamw)
    sgd_range(w, s.grad->f32(), s.m->f32(), piece.begin, piece.end, factor, decay, u.lr, u.momentum, u.first_update);
  else
    adamw_range(w, s.grad->f32(), s.m->f32(), s.v->f32(), piece.begin, piece.end, factor, decay, u);
  if (!c.q.defined()) return;
  // amax and quantize_int8 of one row: the row's values of amax_rows and quantize_int8_rows
  // (below 2^16 columns these run no parallel region of their own; above, theirs nest inactive)
  const int64_t cols = c.q.dim(1);
  for (int64_t r = piece.begin / cols; r < piece.end / cols; ++r) {
    c.amaxes[size_t(r)] = amax(w + r * cols, cols);
    c.scales[size_t(r)] = int8_scale_from_amax(c.amaxes[size_t(r)], s.parameter->int8_rows_qmax);
    quantize_int8(w + r * cols, c.q.as<int8_t>() + r * cols, cols, c.scales[size_t(r)], Rounding::NEAREST_EVEN, 0);
  }
}

void update_slots(const std::vector<OptimizerSlot>& slots, const OptimizerUpdate& u, float factor) {
  // Reused (no allocation in the steady state); the parallel loops reach the caller's through
  // these references (a thread_local's name there would be the team thread's own).
  thread_local std::vector<Int8RowsCopy> copies_buffer;
  thread_local std::vector<UpdatePiece> large_buffer, small_buffer;
  std::vector<Int8RowsCopy>& copies = copies_buffer;
  std::vector<UpdatePiece>& large = large_buffer;
  std::vector<UpdatePiece>& small = small_buffer;
  copies.resize(slots.size());
  small.clear();
  int64_t small_total = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    Int8RowsCopy& c = copies[i];
    c.q = int8_rows_copy_for(slots[i]);
    const int64_t n = slots[i].value->numel(), cols = c.q.defined() ? c.q.dim(1) : 0;
    if (c.q.defined()) c.scales.assign(size_t(c.q.dim(0)), 0.0f);
    if (c.q.defined()) c.amaxes.assign(size_t(c.q.dim(0)), 0.0f);
    if (n <= LARGE_SLOT) {
      add_pieces(int64_t(i), n, cols, SMALL_PIECE, small);
      small_total += n;
      continue;
    }
    large.clear();
    add_pieces(int64_t(i), n, cols, cols > 0 ? 1 : UPDATE_GRAIN, large);
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < large.size(); ++k) update_piece(slots[i], c, large[k], u, factor);
  }
#pragma omp parallel for schedule(dynamic, 1) if (small_total > 2 * SMALL_PIECE)
  for (size_t k = 0; k < small.size(); ++k)
    update_piece(slots[size_t(small[k].slot)], copies[size_t(small[k].slot)], small[k], u, factor);
  for (size_t i = 0; i < slots.size(); ++i) {
    Int8RowsCopy& c = copies[i];
    if (!c.q.defined()) continue;
    c.q.scale_mode = ScaleMode::PER_CHANNEL;
    c.q.scales = Tensor::host_scales(c.scales);
    Parameter* param = slots[i].parameter;
    param->int8_rows = std::move(c.q);
    param->int8_rows_step = u.step + 1;
    param->int8_rows_amax = *std::max_element(c.amaxes.begin(), c.amaxes.end());  // rows > 0
  }
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
  update_slots(slots, u, factor);
  if (result != nullptr) *result = r;
}

}  // namespace qsync
