// File: kernels/cuda/launch.cuh
// Launch helpers shared by the .cu files of kernels/cuda/ (device code only; not a public
// header): the stream cast, grid sizes, a grid-stride elementwise launcher, and block
// reductions whose order is fixed by the thread layout (deterministic for a given launch shape).
//
// Every launcher checks cudaGetLastError right after the launch, so a bad configuration is
// reported at the op that caused it ("<file>:<line>: cudaGetLastError() failed: ...").
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_device.h"

namespace qsync::cuda_launch {

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 65535;

inline int64_t blocks_for(int64_t n, int threads = THREADS) {
  return std::clamp<int64_t>((n + threads - 1) / threads, 1, MAX_BLOCKS);
}

template <typename Op>
__global__ void elementwise_kernel(Op op, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) op(i);
}

// op(i) for i in [0, n), grid-stride; op is a __device__ functor copied by value.
template <typename Op>
void launch_elementwise(const Op& op, int64_t n, void* stream) {
  if (n <= 0) return;
  elementwise_kernel<<<unsigned(blocks_for(n)), THREADS, 0, as_stream(stream)>>>(op, n);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

// Sum of `v` over a block of BLOCK threads (a power of two, at most 1024), in the fixed halving
// order s[i] += s[i + half]; the result is returned to every thread. `scratch` holds BLOCK values.
template <typename T, int BLOCK>
__device__ T block_sum_halving(T v, T* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = BLOCK / 2; half >= 1; half /= 2) {
    if (int(threadIdx.x) < half) scratch[threadIdx.x] = scratch[threadIdx.x] + scratch[threadIdx.x + half];
    __syncthreads();
  }
  const T r = scratch[0];
  __syncthreads();  // scratch is reused by the next call
  return r;
}

}  // namespace qsync::cuda_launch
