// File: kernels/cuda/cudnn_conv.h
// Convolutions on cuDNN 9's backend (graph) API, for the floating-point layer precisions:
// forward, backward data and backward filter of a 2-D cross-correlation with square kernel,
// stride and zero padding, NCHW tensors and KCRS filters (packed), x / w / y in FP32, BF16 or
// FP16 with FP32 compute. Per distinct call (op, shape, type, TF32 allowed, alignments) one
// execution plan is built once and cached: the heuristic's engine configurations are tried in
// order, keeping the first that finalizes and is
//   * deterministic (no NONDETERMINISTIC note: runs repeat bit for bit),
//   * not down-converting its inputs (DOWN_CONVERT_INPUTS is dropped, as PyTorch does),
//   * for FP32 without TF32, not on tensor cores (strict FP32: the fp32 layer precision);
// engines that compile at run time (NVRTC) are taken only when nothing else is left.
// Calls only enqueue on the engine's stream; the workspace grows stream-ordered.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/precision.h"

namespace qsync {

enum class CudnnConvOp : uint8_t { FORWARD, BACKWARD_DATA, BACKWARD_FILTER };

struct CudnnConvShape {
  int64_t n, c, h, w;  // input (N, C, H, W)
  int64_t k;           // output channels (filter K, C, R, S with R = S = kernel)
  int64_t kernel, stride, pad;
  int64_t oh, ow;      // output (N, K, OH, OW)
};

struct CudnnConvCall {
  CudnnConvOp op = CudnnConvOp::FORWARD;
  CudnnConvShape shape{};
  Precision type = Precision::FP32;  // of x, w, y and their gradients: FP32, BF16 or FP16
  bool allow_tf32 = false;           // FP32 only: TF32 tensor-core engines may run it
  // FORWARD: x, w -> y.  BACKWARD_DATA: w, dy -> dx.  BACKWARD_FILTER: x, dy -> dw.
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;
  void* out = nullptr;
  float alpha = 1.0f, beta = 0.0f;  // out = alpha * op + beta * out
};

class CudnnConvEngine {
 public:
  explicit CudnnConvEngine(void* stream);  // on the current device; stream: a cudaStream_t
  ~CudnnConvEngine();
  CudnnConvEngine(const CudnnConvEngine&) = delete;
  CudnnConvEngine& operator=(const CudnnConvEngine&) = delete;

  // Enqueues the convolution; throws std::runtime_error naming the cuDNN call and its message,
  // or when no engine configuration is left after the filters above.
  void run(const CudnnConvCall& call);
  size_t cached_plans() const;
  // "<op> <type>: engine <global index> (<notes>), workspace <bytes>" of a call's plan.
  std::string describe(const CudnnConvCall& call);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "cuDNN 91900 (runtime), headers 9.19.0".
std::string cudnn_version_text();

}  // namespace qsync
