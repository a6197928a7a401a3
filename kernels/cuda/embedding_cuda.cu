// File: kernels/cuda/embedding_cuda.cu
// Embedding ids, forward and the ordered backward (see embedding_cuda.h).
#include "kernels/cuda/embedding_cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;
using cuda_launch::launch_elementwise;

struct Ids {
  const float* x; int32_t* ids; int64_t vocab; unsigned long long* first_bad;
  __device__ void operator()(int64_t i) const {
    const float v = x[i];
    const bool ok = v >= 0.0f && v < float(vocab) && v == floorf(v);
    ids[i] = ok ? int32_t(v) : 0;
    if (!ok) atomicMin(first_bad, (unsigned long long)i);
  }
};
struct Forward {
  const int32_t* ids; const float* wte; const float* wpe; float* y; int64_t tokens, C;
  __device__ void operator()(int64_t i) const {  // i over (b, t, c)
    const int64_t c = i % C, bt = i / C, t = bt % tokens;
    y[i] = __fadd_rn(wte[int64_t(ids[bt]) * C + c], wpe[t * C + c]);
  }
};
struct Iota {
  int32_t* v;
  __device__ void operator()(int64_t i) const { v[i] = int32_t(i); }
};
struct PositionGrad {  // dwpe[t, c] += sum over b of dy[b, t, c], b in order
  const float* dy; float* dwpe; int64_t batch, tokens, C;
  __device__ void operator()(int64_t i) const {
    float acc = dwpe[i];
    for (int64_t b = 0; b < batch; ++b) acc = __fadd_rn(acc, dy[b * tokens * C + i]);
    dwpe[i] = acc;
  }
};
// Thread (channel c, sorted index j): where j starts a run of equal ids, adds the run's dy rows
// (ascending positions: the sort is stable) into dwte[id, c], from its current value.
__global__ void token_grad_kernel(const int32_t* sorted_ids, const int32_t* sorted_pos, int64_t n, int64_t C,
                                  const float* dy, float* dwte) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t j = blockIdx.y; j < n; j += gridDim.y) {
    const int32_t id = sorted_ids[j];
    if (j > 0 && sorted_ids[j - 1] == id) continue;
    float acc = dwte[int64_t(id) * C + c];
    for (int64_t k = j; k < n && sorted_ids[k] == id; ++k) acc = __fadd_rn(acc, dy[int64_t(sorted_pos[k]) * C + c]);
    dwte[int64_t(id) * C + c] = acc;
  }
}

int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < vocab) ++bits;
  return bits;
}

// Scratch layout: ids_out, pos_in, pos_out (n int32 each, 256-byte aligned), then CUB's storage.
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t cub_bytes(int64_t n, int64_t vocab) {
  size_t bytes = 0;
  const cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                        static_cast<int32_t*>(nullptr),
                                                        static_cast<const int32_t*>(nullptr),
                                                        static_cast<int32_t*>(nullptr), int(n), 0, key_bits(vocab));
  QSYNC_CUDA_CHECK(e);
  return bytes;
}

}  // namespace

void embedding_ids_cuda(const float* x, int32_t* ids, int64_t n, int64_t vocab, unsigned long long* first_bad,
                        void* stream) {
  launch_elementwise(Ids{x, ids, vocab, first_bad}, n, stream);
}

void embedding_forward_cuda(const int32_t* ids, const float* wte, const float* wpe, float* y, int64_t batch,
                            int64_t tokens, int64_t C, void* stream) {
  launch_elementwise(Forward{ids, wte, wpe, y, tokens, C}, batch * tokens * C, stream);
}

size_t embedding_backward_scratch_bytes(int64_t positions, int64_t vocab) {
  return 3 * aligned(size_t(positions) * sizeof(int32_t)) + aligned(cub_bytes(positions, vocab));
}

void embedding_backward_cuda(const float* dy, const int32_t* ids, int64_t batch, int64_t tokens, int64_t C,
                             int64_t vocab, float* dwte, float* dwpe, void* scratch, size_t scratch_bytes,
                             void* stream) {
  const int64_t n = batch * tokens;
  if (n <= 0 || C <= 0) return;
  if (n > int64_t(INT32_MAX)) throw std::invalid_argument("embedding_backward_cuda: too many positions for int32 indices");
  const size_t need = embedding_backward_scratch_bytes(n, vocab);
  if (scratch_bytes < need)
    throw std::invalid_argument("embedding_backward_cuda: scratch of " + std::to_string(scratch_bytes) +
                                " bytes, needs " + std::to_string(need));
  char* base = static_cast<char*>(scratch);
  const size_t slot = aligned(size_t(n) * sizeof(int32_t));
  auto* ids_out = reinterpret_cast<int32_t*>(base);
  auto* pos_in = reinterpret_cast<int32_t*>(base + slot);
  auto* pos_out = reinterpret_cast<int32_t*>(base + 2 * slot);
  void* temp = base + 3 * slot;
  size_t temp_bytes = scratch_bytes - 3 * slot;
  launch_elementwise(Iota{pos_in}, n, stream);
  QSYNC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, ids_out, pos_in, pos_out, int(n), 0,
                                                   key_bits(vocab), as_stream(stream)));
  const dim3 grid(unsigned((C + cuda_launch::THREADS - 1) / cuda_launch::THREADS), unsigned(std::min<int64_t>(n, 65535)));
  token_grad_kernel<<<grid, cuda_launch::THREADS, 0, as_stream(stream)>>>(ids_out, pos_out, n, C, dy, dwte);
  QSYNC_CUDA_CHECK(cudaGetLastError());
  launch_elementwise(PositionGrad{dy, dwpe, batch, tokens, C}, tokens * C, stream);
}

}  // namespace qsync
