// File: kernels/cuda/optimizer_cuda.cu
// The canonical gradient norm, the clip / skip control and the SGD / AdamW updates (see
// optimizer_cuda.h).
#include "kernels/cuda/optimizer_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;

constexpr int64_t BLOCK = 2048;  // CANONICAL_SUM_BLOCK of worker/ops/cpu/cpu_kernels.h
constexpr int TREE_THREADS = 1024;

struct DeviceSlot {
  float* value;
  const float* grad;
  float* m;
  float* v;
  int64_t n;
  int32_t decay;
};

struct Control {
  float factor;  // clip * inv_loss_scale
  int32_t skip;
};

// One block per (group, slot): values [g * 2048, g * 2048 + 2048) of the slot's input, zeros
// past its count; thread t adds elements t and t + 1024, then the halving tree from 512.
template <bool SQUARES>
__global__ void tree_level_kernel(const DeviceSlot* slots, const double* in, const int64_t* in_offsets,
                                  const int64_t* in_counts, double* out, const int64_t* out_offsets) {
  __shared__ double s[TREE_THREADS];
  const int64_t slot = blockIdx.y, group = blockIdx.x;
  const int64_t count = SQUARES ? slots[slot].n : in_counts[slot];
  if (group > 0 && group * BLOCK >= count) return;  // group 0 always writes (0 for an empty slot)
  const int64_t base = group * BLOCK, t = threadIdx.x;
  auto leaf = [&](int64_t i) -> double {
    if (i >= count) return 0.0;
    if (SQUARES) {
      const double g = double(slots[slot].grad[i]);
      return g * g;
    }
    return in[in_offsets[slot] + i];
  };
  s[t] = leaf(base + t) + leaf(base + t + TREE_THREADS);
  __syncthreads();
  for (int half = TREE_THREADS / 2; half >= 1; half /= 2) {
    if (t < half) s[t] = s[t] + s[t + half];
    __syncthreads();
  }
  if (t == 0) out[out_offsets[slot] + group] = s[0];
}

// The slots' sums in order, the norm, the clip factor and the skip decision (one thread).
__global__ void control_kernel(const double* partials, const int64_t* sum_offsets, int64_t slots, bool need_norm,
                               double grad_clip, float inv_loss_scale, bool skip_nonfinite, Control* control,
                               CudaOptimizerResult* result) {
  double norm = 0.0;
  if (need_norm) {
    double sq = 0.0;
    for (int64_t i = 0; i < slots; ++i) sq += partials[sum_offsets[i]];
    norm = sqrt(sq) * double(inv_loss_scale);
  }
  const bool skip = skip_nonfinite && !isfinite(norm);
  const float clip = grad_clip > 0 && norm > grad_clip ? float(grad_clip / (norm + 1e-6)) : 1.0f;
  control->factor = __fmul_rn(clip, inv_loss_scale);
  control->skip = skip ? 1 : 0;
  result->grad_norm = norm;
  result->skipped = skip ? 1 : 0;
}

// Grid (blocks, slots): the CPU's expressions, intrinsic by intrinsic.
__global__ void update_kernel(const DeviceSlot* slots, CudaOptimizerHyper h, const Control* control) {
  if (control->skip) return;
  const DeviceSlot s = slots[blockIdx.y];
  const float factor = control->factor;
  const float decay = s.decay ? h.weight_decay : 0.0f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n; i += stride) {
    float w = s.value[i];
    const float g = s.grad[i];
    if (!h.adamw) {
      const float gi = __fadd_rn(__fmul_rn(g, factor), __fmul_rn(decay, w));
      const float m = h.first_update ? gi : __fadd_rn(__fmul_rn(h.momentum, s.m[i]), gi);
      s.m[i] = m;
      s.value[i] = __fsub_rn(w, __fmul_rn(h.lr, m));
    } else {
      const float gi = __fmul_rn(g, factor);
      w = __fsub_rn(w, __fmul_rn(__fmul_rn(h.lr, decay), w));
      const float m = __fadd_rn(__fmul_rn(h.beta1, s.m[i]), __fmul_rn(__fsub_rn(1.0f, h.beta1), gi));
      const float v = __fadd_rn(__fmul_rn(h.beta2, s.v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, h.beta2), gi), gi));
      s.m[i] = m;
      s.v[i] = v;
      const float step = __fdiv_rn(__fmul_rn(h.lr, __fdiv_rn(m, h.bias_correction1)),
                                   __fadd_rn(__fsqrt_rn(__fdiv_rn(v, h.bias_correction2)), h.eps));
      s.value[i] = __fsub_rn(w, step);
    }
  }
}

int64_t groups_of(int64_t count) { return (count + BLOCK - 1) / BLOCK; }

void* device_copy(const void* host, size_t bytes) {
  void* d = nullptr;
  QSYNC_CUDA_CHECK(cudaMalloc(&d, bytes == 0 ? 1 : bytes));
  if (bytes > 0) QSYNC_CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

CudaOptimizerKernels::CudaOptimizerKernels(const std::vector<CudaOptimizerSlot>& slots) : slots_(slots) {
  if (slots.empty()) return;
  if (slots.size() > 65535) throw std::invalid_argument("CudaOptimizerKernels: more than 65535 parameters");
  std::vector<DeviceSlot> table;
  for (const CudaOptimizerSlot& s : slots) {
    table.push_back({s.value, s.grad, s.m, s.v, s.n, s.decay ? 1 : 0});
    max_slot_blocks_ = std::max(max_slot_blocks_, (s.n + cuda_launch::THREADS - 1) / cuda_launch::THREADS);
  }
  device_slots_ = device_copy(table.data(), table.size() * sizeof(DeviceSlot));
  // The levels, until every slot has one value: each level's outputs follow the previous ones in
  // one array of doubles. Slots finished early pass their value through (v + 0 is exact).
  std::vector<int64_t> counts, in_offsets(slots.size(), 0);
  for (const CudaOptimizerSlot& s : slots) counts.push_back(s.n);
  int64_t total = 0;
  for (;;) {
    std::vector<int64_t> out_offsets(slots.size()), next(slots.size());
    int64_t max_groups = 1;
    bool done = true;
    for (size_t i = 0; i < slots.size(); ++i) {
      next[i] = std::max<int64_t>(1, groups_of(counts[i]));
      out_offsets[i] = total;
      total += next[i];
      max_groups = std::max(max_groups, next[i]);
      done = done && next[i] == 1;
    }
    levels_.push_back({device_copy(in_offsets.data(), in_offsets.size() * sizeof(int64_t)),
                       device_copy(counts.data(), counts.size() * sizeof(int64_t)),
                       device_copy(out_offsets.data(), out_offsets.size() * sizeof(int64_t)), max_groups});
    if (done) break;
    in_offsets = out_offsets;
    counts = next;
  }
  QSYNC_CUDA_CHECK(cudaMalloc(&partials_, size_t(total) * sizeof(double)));
  QSYNC_CUDA_CHECK(cudaMalloc(&control_, sizeof(Control)));
}

CudaOptimizerKernels::~CudaOptimizerKernels() {
  for (const Level& l : levels_) {
    (void)cudaFree(l.in_offsets);
    (void)cudaFree(l.in_counts);
    (void)cudaFree(l.out_offsets);
  }
  if (device_slots_ != nullptr) (void)cudaFree(device_slots_);
  if (partials_ != nullptr) (void)cudaFree(partials_);
  if (control_ != nullptr) (void)cudaFree(control_);
}

bool CudaOptimizerKernels::same_slots(const std::vector<CudaOptimizerSlot>& slots) const {
  if (slots.size() != slots_.size()) return false;
  for (size_t i = 0; i < slots.size(); ++i) {
    const CudaOptimizerSlot &a = slots[i], &b = slots_[i];
    if (a.value != b.value || a.grad != b.grad || a.m != b.m || a.v != b.v || a.n != b.n || a.decay != b.decay)
      return false;
  }
  return true;
}

void CudaOptimizerKernels::step(const CudaOptimizerHyper& h, CudaOptimizerResult* result, void* stream) {
  if (slots_.empty()) return;
  const cudaStream_t st = as_stream(stream);
  const int64_t nslots = int64_t(slots_.size());
  const auto* table = static_cast<const DeviceSlot*>(device_slots_);
  auto* partials = static_cast<double*>(partials_);
  auto* control = static_cast<Control*>(control_);
  const bool need_norm = h.grad_clip > 0 || h.skip_nonfinite;
  if (need_norm) {
    for (size_t l = 0; l < levels_.size(); ++l) {
      const Level& lv = levels_[l];
      const dim3 grid(unsigned(lv.max_groups), unsigned(nslots));
      const auto* out_offsets = static_cast<const int64_t*>(lv.out_offsets);
      if (l == 0)
        tree_level_kernel<true><<<grid, TREE_THREADS, 0, st>>>(table, nullptr, nullptr, nullptr, partials, out_offsets);
      else
        tree_level_kernel<false><<<grid, TREE_THREADS, 0, st>>>(table, partials,
                                                                static_cast<const int64_t*>(lv.in_offsets),
                                                                static_cast<const int64_t*>(lv.in_counts), partials,
                                                                out_offsets);
      QSYNC_CUDA_CHECK(cudaGetLastError());
    }
  }
  control_kernel<<<1, 1, 0, st>>>(partials, static_cast<const int64_t*>(levels_.back().out_offsets), nslots, need_norm,
                                  h.grad_clip, h.inv_loss_scale, h.skip_nonfinite, control, result);
  QSYNC_CUDA_CHECK(cudaGetLastError());
  const dim3 grid(unsigned(std::clamp<int64_t>(max_slot_blocks_, 1, 1024)), unsigned(nslots));
  update_kernel<<<grid, cuda_launch::THREADS, 0, st>>>(table, h, control);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qsync
