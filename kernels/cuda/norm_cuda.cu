// File: kernels/cuda/norm_cuda.cu
// Layer norm forward and backward (see norm_cuda.h), after llm.c's warp-per-row kernels.
#include "kernels/cuda/norm_cuda.h"

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;

constexpr int WARPS_PER_BLOCK = 8;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void layernorm_forward_kernel(const float* x, const float* w, const float* b, int64_t rows, int64_t C,
                                         float eps, float* y, float* xhat, float* rstd) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * WARPS_PER_BLOCK) {
    const float* xr = x + r * C;
    float s = 0.0f;
    for (int64_t c = lane; c < C; c += 32) s += xr[c];
    const float mean = warp_sum(s) / float(C);
    float v = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
      const float d = xr[c] - mean;
      v += d * d;
    }
    const float inv = 1.0f / sqrtf(warp_sum(v) / float(C) + eps);
    for (int64_t c = lane; c < C; c += 32) {
      const float n = (xr[c] - mean) * inv;
      y[r * C + c] = n * w[c] + b[c];
      if (xhat != nullptr) xhat[r * C + c] = n;
    }
    if (rstd != nullptr && lane == 0) rstd[r] = inv;
  }
}

// dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = w * dy
__global__ void layernorm_dx_kernel(const float* dy, const float* xhat, const float* rstd, const float* w,
                                    int64_t rows, int64_t C, float* dx) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * WARPS_PER_BLOCK) {
    const float* g = dy + r * C;
    const float* n = xhat + r * C;
    float m1 = 0.0f, m2 = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
      const float dn = w[c] * g[c];
      m1 += dn;
      m2 += dn * n[c];
    }
    m1 = warp_sum(m1) / float(C);
    m2 = warp_sum(m2) / float(C);
    for (int64_t c = lane; c < C; c += 32) dx[r * C + c] = rstd[r] * (w[c] * g[c] - m1 - n[c] * m2);
  }
}

// partial[chunk, c] of dw and db over COLUMN_SUM_CHUNK rows, rows in order; grid (channels, chunks).
__global__ void layernorm_partials_kernel(const float* dy, const float* xhat, int64_t rows, int64_t C, float* pw,
                                          float* pb) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t chunk = blockIdx.y; chunk * COLUMN_SUM_CHUNK < rows; chunk += gridDim.y) {
    const int64_t r0 = chunk * COLUMN_SUM_CHUNK, r1 = r0 + COLUMN_SUM_CHUNK < rows ? r0 + COLUMN_SUM_CHUNK : rows;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      const float g = dy[r * C + c];
      aw = __fadd_rn(aw, __fmul_rn(g, xhat[r * C + c]));
      ab = __fadd_rn(ab, g);
    }
    pw[chunk * C + c] = aw;
    pb[chunk * C + c] = ab;
  }
}

__global__ void layernorm_reduce_kernel(const float* pw, const float* pb, int64_t chunks, int64_t C, float* dw,
                                        float* db) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float aw = dw[c], ab = db[c];
  for (int64_t k = 0; k < chunks; ++k) {
    aw = __fadd_rn(aw, pw[k * C + c]);
    ab = __fadd_rn(ab, pb[k * C + c]);
  }
  dw[c] = aw;
  db[c] = ab;
}

unsigned row_blocks(int64_t rows) {
  return unsigned(std::clamp<int64_t>((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, 1, cuda_launch::MAX_BLOCKS));
}

}  // namespace

void layernorm_forward_cuda(const float* x, const float* w, const float* b, int64_t rows, int64_t C, float eps,
                            float* y, float* xhat, float* rstd, void* stream) {
  if (rows <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), WARPS_PER_BLOCK * 32, 0, as_stream(stream)>>>(x, w, b, rows, C, eps, y,
                                                                                            xhat, rstd);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward_cuda(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t rows,
                             int64_t C, float* dx, float* dw, float* db, float* scratch, void* stream) {
  if (rows <= 0 || C <= 0) return;
  layernorm_dx_kernel<<<row_blocks(rows), WARPS_PER_BLOCK * 32, 0, as_stream(stream)>>>(dy, xhat, rstd, w, rows, C, dx);
  QSYNC_CUDA_CHECK(cudaGetLastError());
  const int64_t chunks = (rows + COLUMN_SUM_CHUNK - 1) / COLUMN_SUM_CHUNK;
  float* pw = scratch;
  float* pb = scratch + chunks * C;
  const unsigned channel_blocks = unsigned((C + cuda_launch::THREADS - 1) / cuda_launch::THREADS);
  layernorm_partials_kernel<<<dim3(channel_blocks, unsigned(std::min<int64_t>(chunks, 65535))), cuda_launch::THREADS, 0,
                              as_stream(stream)>>>(dy, xhat, rows, C, pw, pb);
  QSYNC_CUDA_CHECK(cudaGetLastError());
  layernorm_reduce_kernel<<<channel_blocks, cuda_launch::THREADS, 0, as_stream(stream)>>>(pw, pb, chunks, C, dw, db);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qsync
