// File: kernels/cuda/optimizer_cuda.h
// The CUDA optimizer step, bit-identical to the CPU's (worker/ops/cpu/cpu_loss_optimizer.cpp):
//   * the global gradient norm sums squares in the canonical tree of worker/ops/cpu/cpu_kernels.h
//     (blocks of 2048 values halved pairwise, then groups of 2048 partial sums, level by level,
//     per parameter; the parameters' sums added in order): every square is exact in double and
//     every addition happens in the same order, so the norm has the CPU's bits;
//   * the clip factor and the loss-scale skip are computed on the device from that norm (no host
//     round trip inside the step);
//   * the SGD / AdamW updates are written with the IEEE round-to-nearest intrinsics in the CPU
//     expressions' order (never contracted into FMAs), so equal inputs give equal weights.
// A plain C++ header: `stream` is a cudaStream_t as void*; device pointers; enqueue only.
#pragma once

#include <cstdint>
#include <vector>

namespace qsync {

struct CudaOptimizerSlot {
  float* value;
  const float* grad;
  float* m;
  float* v;  // AdamW only
  int64_t n;
  bool decay;
};

struct CudaOptimizerHyper {
  bool adamw = true;
  float lr = 0, weight_decay = 0, momentum = 0.9f;
  bool first_update = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, bias_correction1 = 1, bias_correction2 = 1;
  double grad_clip = 0;
  float inv_loss_scale = 1.0f;
  bool skip_nonfinite = false;
};

// What the step leaves on the device for the host (read after synchronizing).
struct CudaOptimizerResult {
  double grad_norm;
  int32_t skipped;
};

// The device tables of one set of slots (built once; the slots' pointers must stay valid).
class CudaOptimizerKernels {
 public:
  explicit CudaOptimizerKernels(const std::vector<CudaOptimizerSlot>& slots);
  ~CudaOptimizerKernels();
  CudaOptimizerKernels(const CudaOptimizerKernels&) = delete;
  CudaOptimizerKernels& operator=(const CudaOptimizerKernels&) = delete;

  bool same_slots(const std::vector<CudaOptimizerSlot>& slots) const;
  // Enqueues the norm (when clipping or skipping), the factor and the update; *result (device
  // memory) receives the norm and the skip flag.
  void step(const CudaOptimizerHyper& h, CudaOptimizerResult* result, void* stream);

 private:
  struct Level {  // one level of the canonical tree: per slot, its input values and outputs
    void* in_offsets;   // int64 per slot (device)
    void* in_counts;
    void* out_offsets;
    int64_t max_groups;
  };
  std::vector<CudaOptimizerSlot> slots_;
  void* device_slots_ = nullptr;  // the slot table (device)
  void* partials_ = nullptr;      // doubles of every level (device)
  void* control_ = nullptr;       // factor and flags (device)
  std::vector<Level> levels_;
  int64_t max_slot_blocks_ = 0;
};

}  // namespace qsync
