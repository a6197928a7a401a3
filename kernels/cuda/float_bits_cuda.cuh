// File: kernels/cuda/float_bits_cuda.cuh
// The bit-exact FP16 / BF16 / FP8 conversions of float_convert_ref.cpp as __host__ __device__
// functions (device code only; not a public header): the kernels of quantize_cuda.cu call them on
// the GPU, and its host twins (quantize_cuda.h) run the very same code on the CPU, where the
// cuda_fp16 / cuda_bf16 / cuda_fp8 intrinsics take their software paths. See quantize_cuda.cu's
// header for why every case is written out.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#define QSYNC_HD __host__ __device__ inline

namespace qsync::cuda_bits {

QSYNC_HD uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}
QSYNC_HD float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}
QSYNC_HD bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
QSYNC_HD bool is_inf_bits(uint32_t u) { return (u & 0x7fffffffu) == 0x7f800000u; }
// |x| clamped to `max_finite` (finite x only).
QSYNC_HD float magnitude_clamped(uint32_t u, float max_finite) {
  const float a = bits_float(u & 0x7fffffffu);
  return a > max_finite ? max_finite : a;
}

QSYNC_HD uint16_t fp32_to_fp16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  if (is_nan_bits(u)) return uint16_t(sign | 0x7c00u | 0x0200u | ((u >> 13) & 0x3ffu));
  if (is_inf_bits(u)) return uint16_t(sign | 0x7c00u);
  const __half_raw h = __float2half_rn(magnitude_clamped(u, 65504.0f));  // finite overflow saturates
  return uint16_t(sign | h.x);
}

QSYNC_HD float fp16_bits_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, man = h & 0x3ffu;
  if ((h & 0x7c00u) == 0x7c00u && man != 0) return bits_float(sign | 0x7fc00000u | (man << 13));
  __half_raw raw;
  raw.x = h;
  return __half2float(__half(raw));
}

QSYNC_HD uint16_t fp32_to_bf16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  if (is_nan_bits(u)) return uint16_t(sign | 0x7f80u | 0x0040u | ((u >> 16) & 0x7fu));
  if (is_inf_bits(u)) return uint16_t(sign | 0x7f80u);
  const __nv_bfloat16_raw b = __float2bfloat16_rn(magnitude_clamped(u, bits_float(0x7f7f0000u)));  // bf16 max
  return uint16_t(sign | b.x);
}

QSYNC_HD float bf16_bits_to_fp32(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// E4M3: no inf (inf saturates to 448), one NaN per sign (S.1111.111).
QSYNC_HD uint8_t fp32_to_e4m3_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  if (is_nan_bits(u)) return uint8_t(sign | 0x7fu);
  if (is_inf_bits(u)) return uint8_t(sign | 0x7eu);  // 448
  const float a = magnitude_clamped(u, 448.0f);     // finite overflow saturates
  if (a <= 0x1p-10f) return sign;  // at most half the smallest subnormal 2^-9: +-0
  return uint8_t(sign | __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

QSYNC_HD float e4m3_bits_to_fp32(uint8_t v) {
  if ((v & 0x7fu) == 0x7fu) return bits_float((uint32_t(v & 0x80u) << 24) | 0x7fc00000u | (7u << 20));
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

// E5M2: IEEE-like, inf stays inf, NaN keeps the quiet bit and the top payload bit.
QSYNC_HD uint8_t fp32_to_e5m2_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  if (is_nan_bits(u)) return uint8_t(sign | 0x7cu | 0x02u | ((u >> 21) & 0x3u));
  if (is_inf_bits(u)) return uint8_t(sign | 0x7cu);
  const float a = magnitude_clamped(u, 57344.0f);  // finite overflow saturates
  if (a <= 0x1p-17f) return sign;                   // at most half the smallest subnormal 2^-16: +-0
  return uint8_t(sign | __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E5M2));
}

QSYNC_HD float e5m2_bits_to_fp32(uint8_t v) {
  const uint32_t man = v & 0x3u;
  if ((v & 0x7cu) == 0x7cu && man != 0)
    return bits_float((uint32_t(v & 0x80u) << 24) | 0x7fc00000u | (man << 21));
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E5M2)));
}

}  // namespace qsync::cuda_bits
