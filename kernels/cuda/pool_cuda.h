// File: kernels/cuda/pool_cuda.h
// CUDA max pooling and global average pooling, bit-identical to the CPU loops: the max scans
// each window in row-major order with the CPU's comparisons (padded cells never win, a NaN wins,
// ties go to the first cell); the max-pool backward gathers, per input element, the gradients of
// the outputs whose argmax it is in output order (the CPU's order of additions); the averages
// sum positions in order. A plain C++ header: `stream` is a cudaStream_t as void*; device
// pointers; enqueue only.
#pragma once

#include <cstdint>

namespace qsync {

struct Pool2dShape {
  int64_t c, h, w, kernel, stride, pad, oh, ow;
};

// y (B, C, OH, OW); argmax (same shape, int32 index into the (H, W) plane) or null.
void maxpool_forward_cuda(const float* x, float* y, int32_t* argmax, int64_t batch, const Pool2dShape& g, void* stream);
// dx (B, C, H, W) written (zeros where no output picked the element).
void maxpool_backward_cuda(const float* dy, const int32_t* argmax, float* dx, int64_t batch, const Pool2dShape& g,
                           void* stream);
// Images x (B, C, N) (tokens false) or tokens x (B, N, C) -> y (B, C) = the mean over N.
void avgpool_forward_cuda(const float* x, float* y, int64_t batch, int64_t channels, int64_t positions, bool tokens,
                          void* stream);
void avgpool_backward_cuda(const float* dy, float* dx, int64_t batch, int64_t channels, int64_t positions, bool tokens,
                           void* stream);

}  // namespace qsync
