// File: kernels/cuda/elementwise_cuda.cu
// Elementwise kernels and simple ordered sums (see elementwise_cuda.h). Floating-point steps are
// written with the _rn intrinsics where the CPU loop's result must be reproduced bit for bit
// (nvcc never contracts them into FMAs).
#include "kernels/cuda/elementwise_cuda.h"

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;
using cuda_launch::launch_elementwise;

constexpr float INV_SQRT2 = 0.70710678118654752440f;
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;

struct ReluForward {
  const float* x; float* y; uint8_t* mask;
  __device__ void operator()(int64_t i) const {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
    if (mask != nullptr) mask[i] = v > 0.0f ? 1 : 0;
  }
};
struct ReluBackward {
  const float* dy; const uint8_t* mask; float* dx;
  __device__ void operator()(int64_t i) const { dx[i] = mask[i] ? dy[i] : 0.0f; }
};
// y = 0.5 x (1 + erf(x / sqrt 2))
// y = 0.5 x (1 + erf(x / sqrt 2));  dydx = 0.5 (1 + erf(x / sqrt 2)) + x phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi) (in training only)
struct GeluForward {
  const float* x; float* y; float* dydx;
  __device__ void operator()(int64_t i) const {
    const float v = x[i];
    const float onep = __fadd_rn(1.0f, erff(__fmul_rn(v, INV_SQRT2)));
    y[i] = __fmul_rn(__fmul_rn(0.5f, v), onep);
    if (dydx == nullptr) return;
    const float pdf = expf(__fmul_rn(__fmul_rn(-0.5f, v), v));
    dydx[i] = __fadd_rn(__fmul_rn(0.5f, onep), __fmul_rn(__fmul_rn(v, INV_SQRT_2PI), pdf));
  }
};
// dx = dy dydx (the derivative the forward saved)
struct GeluBackward {
  const float* dydx; const float* dy; float* dx;
  __device__ void operator()(int64_t i) const { dx[i] = __fmul_rn(dy[i], dydx[i]); }
};
struct Add {
  const float* a; const float* b; float* out;
  __device__ void operator()(int64_t i) const { out[i] = __fadd_rn(a[i], b[i]); }
};
struct Accumulate {
  const float* x; float* y;
  __device__ void operator()(int64_t i) const { y[i] = __fadd_rn(y[i], x[i]); }
};

// worker/layers/layer_seed.h: counter_hash(key, i) = splitmix64(key + i * GAMMA), hash_to_unit.
__device__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
struct DropoutForward {
  const float* x; float* y; uint8_t* mask; double p; uint64_t key; float scale;
  __device__ void operator()(int64_t i) const {
    const uint64_t h = splitmix64(key + uint64_t(i) * 0x9e3779b97f4a7c15ull);
    const uint8_t keep = double(h >> 11) * 0x1.0p-53 >= p ? 1 : 0;
    mask[i] = keep;
    y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
  }
};
struct DropoutBackward {
  const float* dy; const uint8_t* mask; float* dx; float scale;
  __device__ void operator()(int64_t i) const { dx[i] = mask[i] ? __fmul_rn(dy[i], scale) : 0.0f; }
};
struct AddBroadcast {
  const float* x; const float* table; float* y; int64_t n;
  __device__ void operator()(int64_t i) const { y[i] = __fadd_rn(x[i], table[i % n]); }
};
// One thread per table element, the batch (rows) in order: the CPU's order.
struct ColumnSumsInto {
  const float* src; float* dst; int64_t rows, n;
  __device__ void operator()(int64_t j) const {
    float acc = dst[j];
    for (int64_t r = 0; r < rows; ++r) acc = __fadd_rn(acc, src[r * n + j]);
    dst[j] = acc;
  }
};
// Partial column sums of COLUMN_SUM_CHUNK rows: partial[chunk, j], grid (columns, chunks).
__global__ void column_partials_kernel(const float* src, float* partial, int64_t rows, int64_t n) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  for (int64_t chunk = blockIdx.y; chunk * COLUMN_SUM_CHUNK < rows; chunk += gridDim.y) {
    const int64_t r0 = chunk * COLUMN_SUM_CHUNK, r1 = r0 + COLUMN_SUM_CHUNK < rows ? r0 + COLUMN_SUM_CHUNK : rows;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc = __fadd_rn(acc, src[r * n + j]);
    partial[chunk * n + j] = acc;
  }
}

struct FillUniform {
  float* x; uint64_t seed;
  __device__ void operator()(int64_t i) const {
    const uint64_t h = splitmix64(seed + uint64_t(i) * 0x9e3779b97f4a7c15ull);
    x[i] = float(h >> 40) * 0x1p-23f - 1.0f;  // 24 bits: exact
  }
};

struct BiasAddRows {
  float* y; const float* b; int64_t n;
  __device__ void operator()(int64_t i) const { y[i] = __fadd_rn(y[i], b[i % n]); }
};

}  // namespace

void relu_forward_cuda(const float* x, float* y, uint8_t* mask, int64_t n, void* stream) {
  launch_elementwise(ReluForward{x, y, mask}, n, stream);
}
void relu_backward_cuda(const float* dy, const uint8_t* mask, float* dx, int64_t n, void* stream) {
  launch_elementwise(ReluBackward{dy, mask, dx}, n, stream);
}
void gelu_forward_cuda(const float* x, float* y, float* dydx, int64_t n, void* stream) {
  launch_elementwise(GeluForward{x, y, dydx}, n, stream);
}
void gelu_backward_cuda(const float* dydx, const float* dy, float* dx, int64_t n, void* stream) {
  launch_elementwise(GeluBackward{dydx, dy, dx}, n, stream);
}
void add_cuda(const float* a, const float* b, float* out, int64_t n, void* stream) {
  launch_elementwise(Add{a, b, out}, n, stream);
}
void accumulate_cuda(const float* x, float* y, int64_t n, void* stream) { launch_elementwise(Accumulate{x, y}, n, stream); }
void dropout_forward_cuda(const float* x, float* y, uint8_t* mask, int64_t n, double p, uint64_t key, float scale,
                          void* stream) {
  launch_elementwise(DropoutForward{x, y, mask, p, key, scale}, n, stream);
}
void dropout_backward_cuda(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale, void* stream) {
  launch_elementwise(DropoutBackward{dy, mask, dx, scale}, n, stream);
}
void add_broadcast_cuda(const float* x, const float* table, float* y, int64_t batch, int64_t n, void* stream) {
  if (n <= 0) return;
  launch_elementwise(AddBroadcast{x, table, y, n}, batch * n, stream);
}
void sum_batch_into_cuda(const float* dy, float* table, int64_t batch, int64_t n, void* stream) {
  launch_elementwise(ColumnSumsInto{dy, table, batch, n}, n, stream);
}
void bias_grad_rows_cuda(const float* dy, float* db, int64_t rows, int64_t n, float* scratch, void* stream) {
  if (rows <= COLUMN_SUM_CHUNK) return launch_elementwise(ColumnSumsInto{dy, db, rows, n}, n, stream);
  const int64_t chunks = (rows + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK;
  const dim3 grid(unsigned((n + cuda_launch::THREADS - 1) / cuda_launch::THREADS),
                  unsigned(std::min<int64_t>(chunks, 65535)));
  column_partials_kernel<<<grid, cuda_launch::THREADS, 0, as_stream(stream)>>>(dy, scratch, rows, n);
  QSYNC_CUDA_CHECK(cudaGetLastError());
  launch_elementwise(ColumnSumsInto{scratch, db, chunks, n}, n, stream);
}
void fill_uniform_cuda(float* x, int64_t n, uint64_t seed, void* stream) {
  launch_elementwise(FillUniform{x, seed}, n, stream);
}

void bias_add_rows_cuda(float* y, const float* b, int64_t rows, int64_t n, void* stream) {
  if (n <= 0) return;
  launch_elementwise(BiasAddRows{y, b, n}, rows * n, stream);
}

}  // namespace qsync
