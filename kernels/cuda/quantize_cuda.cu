// File: kernels/cuda/quantize_cuda.cu
// CUDA quantizers, converters and the GEMM dequant epilogue (see quantize_cuda.h).
//
// Bit-exactness with the CPU `_ref` functions:
//   * every float operation is written as the intrinsic of exactly what the reference does
//     (__fdiv_rn, __fmul_rn, __fadd_rn, and __fmaf_rn where it fuses), which nvcc never
//     contracts or reorders (plain a * b + c may become an FMA). Needs no --use_fast_math and
//     no -ftz=true: subnormals must stay exact;
//   * NaN, inf and overflow are handled explicitly with the reference's bit patterns, and the
//     cuda_fp16 / cuda_bf16 / cuda_fp8 intrinsics only see finite values already clamped to the
//     format's max finite value, where their round-to-nearest-even is the reference's;
//   * a NaN is never fed to a multiply: the GPU returns a canonical NaN where x86 propagates the
//     operand, so the NaN's own bits (quieted) are carried through instead.
#include "kernels/cuda/quantize_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/float_bits_cuda.cuh"
#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {
using namespace cuda_bits;    // NOLINT: the conversions of float_bits_cuda.cuh
using namespace cuda_launch;  // NOLINT: as_stream, THREADS, blocks_for, launch_elementwise

// x * s as one FP32 multiply, except that a NaN x passes through quieted (what x86 returns;
// the GPU would return its canonical NaN).
__device__ float scaled(float x, float s) {
  const uint32_t u = float_bits(x);
  return is_nan_bits(u) ? bits_float(u | 0x00400000u) : __fmul_rn(x, s);
}

struct Fp32ToFp16 {
  const float* x; uint16_t* y;
  __device__ void operator()(int64_t i) const { y[i] = fp32_to_fp16_bits(x[i]); }
};
struct Fp16ToFp32 {
  const uint16_t* x; float* y;
  __device__ void operator()(int64_t i) const { y[i] = fp16_bits_to_fp32(x[i]); }
};
struct Fp32ToBf16 {
  const float* x; uint16_t* y;
  __device__ void operator()(int64_t i) const { y[i] = fp32_to_bf16_bits(x[i]); }
};
struct Bf16ToFp32 {
  const uint16_t* x; float* y;
  __device__ void operator()(int64_t i) const { y[i] = bf16_bits_to_fp32(x[i]); }
};
template <bool E4M3>
struct Fp32ToFp8 {
  const float* x; uint8_t* y; const float* inv_scale;
  __device__ void operator()(int64_t i) const {
    const float v = scaled(x[i], *inv_scale);
    y[i] = E4M3 ? fp32_to_e4m3_bits(v) : fp32_to_e5m2_bits(v);
  }
};
template <bool E4M3>
struct Fp8ToFp32 {
  const uint8_t* x; float* y; const float* scale;
  __device__ void operator()(int64_t i) const {
    y[i] = scaled(E4M3 ? e4m3_bits_to_fp32(x[i]) : e5m2_bits_to_fp32(x[i]), *scale);
  }
};

// ---------------------------------------------------------------------------------------------
// amax: NaN-ignoring max |x|. fmaxf drops NaN operands; non-negative floats order like their
// bit patterns as unsigned ints, so atomicMax on the bits is a float max.
__device__ float block_max(float v) {
  __shared__ float warp_max[THREADS / 32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = threadIdx.x < THREADS / 32 ? warp_max[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // warp_max is reused by the next call
  return v;
}

__global__ void amax_kernel(const float* x, int64_t n, float* out) {
  float v = 0.0f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) v = fmaxf(v, fabsf(x[i]));
  v = block_max(v);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(v));
}

// One block per row (grid-stride over rows).
__global__ void amax_rows_kernel(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;
    float v = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v = fmaxf(v, fabsf(row[c]));
    v = block_max(v);
    if (threadIdx.x == 0) out[r] = v;
  }
}

// ---------------------------------------------------------------------------------------------
// INT8 (quantize_ref.cpp semantics):
//   inv = 1 / scale; NEAREST_EVEN: rint(x * inv); STOCHASTIC: floor(fma(x, inv, u));
//   NaN -> 0; clamp to [-127, 127].
// The noise is qsync::stochastic_uniform of kernels/ref/quantize_ref.cpp, the same integer
// arithmetic: key = mix64(seed), z = lowbias32((uint32(key) + uint32(i / 2 + 1) * golden) ^
// uint32(key >> 32)), u = 2^-16 times bits 16 (i % 2) .. 16 (i % 2) + 15 of z.
QSYNC_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
QSYNC_HD uint32_t lowbias32(uint32_t x) {
  x = (x ^ (x >> 16)) * 0x7feb352du;
  x = (x ^ (x >> 15)) * 0x846ca68bu;
  return x ^ (x >> 16);
}
QSYNC_HD float stochastic_uniform_hd(uint64_t seed, uint64_t index) {
  const uint64_t key = mix64(seed);
  const uint32_t z = lowbias32((uint32_t(key) + uint32_t(index / 2 + 1) * 0x9e3779b9u) ^ uint32_t(key >> 32));
  return float((z >> (16 * (index % 2))) & 0xffffu) * 0x1p-16f;  // < 2^16: exact
}

__device__ int8_t quantize_one(float x, float scale, Rounding r, uint64_t seed, uint64_t index) {
  const float inv = __fdiv_rn(1.0f, scale);
  const float y = r == Rounding::STOCHASTIC ? floorf(__fmaf_rn(x, inv, stochastic_uniform_hd(seed, index)))
                                            : rintf(__fmul_rn(x, inv));  // rint: ties to even
  if (isnan(y)) return 0;
  return int8_t(fminf(fmaxf(y, -127.0f), 127.0f));
}

struct QuantizeTensor {
  const float* x; int8_t* q; const float* scale; Rounding r; uint64_t seed;
  __device__ void operator()(int64_t i) const { q[i] = quantize_one(x[i], *scale, r, seed, uint64_t(i)); }
};
struct QuantizeRows {
  const float* x; int8_t* q; int64_t cols; const float* scales; Rounding r; uint64_t seed;
  __device__ void operator()(int64_t i) const { q[i] = quantize_one(x[i], scales[i / cols], r, seed, uint64_t(i)); }
};
struct Dequantize {
  const int8_t* q; float* x; const float* scale;
  __device__ void operator()(int64_t i) const { x[i] = __fmul_rn(float(q[i]), *scale); }
};
struct ScaleFromAmax {
  const float* amax; float* scale;
  __device__ void operator()(int64_t i) const { scale[i] = amax[i] == 0.0f ? 1.0f : __fdiv_rn(amax[i], 127.0f); }
};

// ---------------------------------------------------------------------------------------------
// GEMM epilogue: c[i, j] = acc[i, j] * sa(i) * sb(j) + beta * c[i, j].
__device__ float channel_scale(const float* s, ScaleMode mode, int64_t channel) {
  if (mode == ScaleMode::NONE) return 1.0f;
  return mode == ScaleMode::PER_CHANNEL ? s[channel] : s[0];
}

template <typename Acc>
struct Epilogue {
  const Acc* acc; int64_t ld_acc; float* c; int64_t ldc; int64_t n; EpilogueScales s; float beta;
  __device__ void operator()(int64_t idx) const {
    const int64_t i = idx / n, j = idx % n;
    float v = __fmul_rn(__fmul_rn(float(acc[i * ld_acc + j]), channel_scale(s.sa, s.sa_mode, i)),
                        channel_scale(s.sb, s.sb_mode, j));
    if (s.bias != nullptr) v = __fadd_rn(v, s.bias[j]);
    float* out = c + i * ldc + j;
    *out = beta == 0.0f ? v : __fadd_rn(v, __fmul_rn(beta, *out));  // beta == 0: c is not read
  }
};

struct ScalesFromAmax {
  const float* amax; float* scale; float* inv_scale; float divisor;
  __device__ void operator()(int64_t i) const {
    const float s = amax[i] == 0.0f ? 1.0f : __fdiv_rn(amax[i], divisor);
    scale[i] = s;
    if (inv_scale != nullptr) inv_scale[i] = __fdiv_rn(1.0f, s);
  }
};

// 32 x 32 tiles, 32 x 8 threads: each thread handles 4 rows of a tile.
constexpr int TILE = 32, TILE_ROWS = 8;

template <typename Q, typename Encode>
__global__ void quantize_2d_kernel(const float* x, Q* q, Q* q_t, int64_t rows, int64_t cols, Encode encode) {
  __shared__ Q tile[TILE][TILE + 1];
  const int64_t c0 = int64_t(blockIdx.x) * TILE;
  const int64_t row_tiles = (rows + TILE - 1) / TILE;
  for (int64_t ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {  // grid-stride over row tiles
    const int64_t r0 = ty * TILE;
    for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) {
        const Q v = encode(x[r * cols + c], uint64_t(r * cols + c));
        q[r * cols + c] = v;
        tile[k][threadIdx.x] = v;
      }
    }
    if (q_t == nullptr) continue;
    __syncthreads();
    for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;  // q_t (cols, rows): row c, column r
      if (r < rows && c < cols) q_t[c * rows + r] = tile[threadIdx.x][k];
    }
    __syncthreads();  // the tile is rewritten by the next row tile
  }
}

template <typename Q, typename Encode>
void launch_quantize_2d(const float* x, Q* q, Q* q_t, int64_t rows, int64_t cols, Encode encode, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t col_tiles = (cols + TILE - 1) / TILE, row_tiles = (rows + TILE - 1) / TILE;
  if (col_tiles > int64_t(INT32_MAX))
    throw std::invalid_argument("quantize_2d_cuda: " + std::to_string(cols) + " columns are too many for one grid");
  const dim3 grid(unsigned(col_tiles), unsigned(std::min<int64_t>(row_tiles, 65535)));
  quantize_2d_kernel<<<grid, dim3(TILE, TILE_ROWS), 0, as_stream(stream)>>>(x, q, q_t, rows, cols, encode);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

struct Int8Encode {
  const float* scale; Rounding r; uint64_t seed;
  __device__ int8_t operator()(float v, uint64_t index) const { return quantize_one(v, *scale, r, seed, index); }
};
template <bool E4M3>
struct Fp8Encode {
  const float* inv_scale;
  __device__ uint8_t operator()(float v, uint64_t) const {
    const float s = scaled(v, *inv_scale);
    return E4M3 ? fp32_to_e4m3_bits(s) : fp32_to_e5m2_bits(s);
  }
};

__device__ float round_sixteen(float v, SixteenBit f) {
  if (f == SixteenBit::BF16) return bf16_bits_to_fp32(fp32_to_bf16_bits(v));
  if (f == SixteenBit::FP16) return fp16_bits_to_fp32(fp32_to_fp16_bits(v));
  return v;
}

struct DequantizeToFp32 {
  const int8_t* q; float* out; int64_t cols; const float* scales; bool per_row; SixteenBit round_to;
  __device__ void operator()(int64_t i) const {
    out[i] = round_sixteen(__fmul_rn(float(q[i]), scales[per_row ? i / cols : 0]), round_to);
  }
};
struct DequantizeToSixteen {
  const int8_t* q; uint16_t* out; int64_t cols; const float* scales; bool per_row; SixteenBit format;
  __device__ void operator()(int64_t i) const {
    const float v = __fmul_rn(float(q[i]), scales[per_row ? i / cols : 0]);
    out[i] = format == SixteenBit::BF16 ? fp32_to_bf16_bits(v) : fp32_to_fp16_bits(v);
  }
};
struct RoundSixteen {
  float* x; SixteenBit format;
  __device__ void operator()(int64_t i) const { x[i] = round_sixteen(x[i], format); }
};

}  // namespace

void scales_from_amax_cuda(const float* amax, float* scale, float* inv_scale, int64_t count, float divisor,
                           void* stream) {
  launch_elementwise(ScalesFromAmax{amax, scale, inv_scale, divisor}, count, stream);
}

void quantize_int8_2d_cuda(const float* x, int8_t* q, int8_t* q_t, int64_t rows, int64_t cols, const float* scale,
                           Rounding r, uint64_t seed, void* stream) {
  launch_quantize_2d(x, q, q_t, rows, cols, Int8Encode{scale, r, seed}, stream);
}

void quantize_fp8_2d_cuda(const float* x, uint8_t* y, uint8_t* y_t, int64_t rows, int64_t cols, const float* inv_scale,
                          bool e4m3, void* stream) {
  if (e4m3) launch_quantize_2d(x, y, y_t, rows, cols, Fp8Encode<true>{inv_scale}, stream);
  else launch_quantize_2d(x, y, y_t, rows, cols, Fp8Encode<false>{inv_scale}, stream);
}

void dequantize_int8_to_fp32_cuda(const int8_t* q, float* out, int64_t rows, int64_t cols, const float* scales,
                                  bool per_row, SixteenBit round_to, void* stream) {
  if (cols <= 0) return;
  launch_elementwise(DequantizeToFp32{q, out, cols, scales, per_row, round_to}, rows * cols, stream);
}

void dequantize_int8_to_sixteen_cuda(const int8_t* q, uint16_t* out, int64_t rows, int64_t cols, const float* scales,
                                     bool per_row, SixteenBit format, void* stream) {
  if (cols <= 0) return;
  launch_elementwise(DequantizeToSixteen{q, out, cols, scales, per_row, format}, rows * cols, stream);
}

void round_to_sixteen_bit_cuda(float* x, int64_t n, SixteenBit format, void* stream) {
  launch_elementwise(RoundSixteen{x, format}, n, stream);
}

void amax_cuda(const float* x, int64_t n, float* out, void* stream) {
  QSYNC_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), as_stream(stream)));
  if (n <= 0) return;
  amax_kernel<<<unsigned(std::min<int64_t>(blocks_for(n), 1024)), THREADS, 0, as_stream(stream)>>>(x, n, out);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

void amax_rows_cuda(const float* x, int64_t rows, int64_t cols, float* out, void* stream) {
  if (rows <= 0) return;
  amax_rows_kernel<<<unsigned(std::min(rows, MAX_BLOCKS)), THREADS, 0, as_stream(stream)>>>(x, rows, cols, out);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

void int8_scale_from_amax_cuda(const float* amax, float* scale, int64_t count, void* stream) {
  launch_elementwise(ScaleFromAmax{amax, scale}, count, stream);
}

void quantize_int8_cuda(const float* x, int8_t* q, int64_t n, const float* scale, Rounding r, uint64_t seed,
                        void* stream) {
  launch_elementwise(QuantizeTensor{x, q, scale, r, seed}, n, stream);
}

void quantize_int8_rows_cuda(const float* x, int8_t* q, int64_t rows, int64_t cols, const float* scales,
                             Rounding r, uint64_t seed, void* stream) {
  if (cols <= 0) return;
  launch_elementwise(QuantizeRows{x, q, cols, scales, r, seed}, rows * cols, stream);
}

void dequantize_int8_cuda(const int8_t* q, float* x, int64_t n, const float* scale, void* stream) {
  launch_elementwise(Dequantize{q, x, scale}, n, stream);
}

void convert_fp32_to_fp16_cuda(const float* x, uint16_t* y, int64_t n, void* stream) {
  launch_elementwise(Fp32ToFp16{x, y}, n, stream);
}
void convert_fp16_to_fp32_cuda(const uint16_t* x, float* y, int64_t n, void* stream) {
  launch_elementwise(Fp16ToFp32{x, y}, n, stream);
}
void convert_fp32_to_bf16_cuda(const float* x, uint16_t* y, int64_t n, void* stream) {
  launch_elementwise(Fp32ToBf16{x, y}, n, stream);
}
void convert_bf16_to_fp32_cuda(const uint16_t* x, float* y, int64_t n, void* stream) {
  launch_elementwise(Bf16ToFp32{x, y}, n, stream);
}
void convert_fp32_to_e4m3_cuda(const float* x, uint8_t* y, int64_t n, const float* inv_scale, void* stream) {
  launch_elementwise(Fp32ToFp8<true>{x, y, inv_scale}, n, stream);
}
void convert_e4m3_to_fp32_cuda(const uint8_t* x, float* y, int64_t n, const float* scale, void* stream) {
  launch_elementwise(Fp8ToFp32<true>{x, y, scale}, n, stream);
}
void convert_fp32_to_e5m2_cuda(const float* x, uint8_t* y, int64_t n, const float* inv_scale, void* stream) {
  launch_elementwise(Fp32ToFp8<false>{x, y, inv_scale}, n, stream);
}
void convert_e5m2_to_fp32_cuda(const uint8_t* x, float* y, int64_t n, const float* scale, void* stream) {
  launch_elementwise(Fp8ToFp32<false>{x, y, scale}, n, stream);
}

void gemm_dequant_epilogue_cuda(const int32_t* acc, int64_t ld_acc, float* c, int64_t ldc, int64_t m, int64_t n,
                                const EpilogueScales& scales, float beta, void* stream) {
  launch_elementwise(Epilogue<int32_t>{acc, ld_acc, c, ldc, n, scales, beta}, m * n, stream);
}
void gemm_dequant_epilogue_cuda(const float* acc, int64_t ld_acc, float* c, int64_t ldc, int64_t m, int64_t n,
                                const EpilogueScales& scales, float beta, void* stream) {
  launch_elementwise(Epilogue<float>{acc, ld_acc, c, ldc, n, scales, beta}, m * n, stream);
}

float stochastic_uniform_cuda_twin(uint64_t seed, uint64_t index) { return stochastic_uniform_hd(seed, index); }
uint16_t fp32_to_fp16_cuda_twin(float x) { return fp32_to_fp16_bits(x); }
float fp16_to_fp32_cuda_twin(uint16_t h) { return fp16_bits_to_fp32(h); }
uint16_t fp32_to_bf16_cuda_twin(float x) { return fp32_to_bf16_bits(x); }
float bf16_to_fp32_cuda_twin(uint16_t b) { return bf16_bits_to_fp32(b); }
uint8_t fp32_to_e4m3_cuda_twin(float x) { return fp32_to_e4m3_bits(x); }
float e4m3_to_fp32_cuda_twin(uint8_t v) { return e4m3_bits_to_fp32(v); }
uint8_t fp32_to_e5m2_cuda_twin(float x) { return fp32_to_e5m2_bits(x); }
float e5m2_to_fp32_cuda_twin(uint8_t v) { return e5m2_bits_to_fp32(v); }

}  // namespace qsync
