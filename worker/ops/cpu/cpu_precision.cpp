// File: worker/ops/cpu/cpu_precision.cpp
// CpuOps: the precision primitives (16-bit conversion and rounding, INT8 and FP8 quantization,
// INT8 dequantization, transposes) on the vectorized kernels of kernels/.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/float_convert.h"
#include "kernels/quantize.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.shape().back(); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.shape().back(); }

constexpr int64_t CHUNK = 4096;  // cache-sized pieces of the conversions through FP32 buffers

// In place, len <= CHUNK FP32 values rounded to the 16-bit format p and back.
void round_chunk(float* x, int64_t len, Precision p) {
  uint16_t buf[CHUNK];
  if (p == Precision::BF16) {
    convert_fp32_to_bf16(x, buf, len);
    convert_bf16_to_fp32(buf, x, len);
  } else {
    convert_fp32_to_fp16(x, buf, len);
    convert_fp16_to_fp32(buf, x, len);
  }
}

// round_chunk over a whole buffer, in parallel when large (elementwise: the same bits at any
// thread count).
void round_buffer(float* x, int64_t n, Precision p) {
  const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t c = 0; c < chunks; ++c) round_chunk(x + c * CHUNK, std::min(CHUNK, n - c * CHUNK), p);
}

void transpose_bytes(const void* src, void* dst, int64_t rows, int64_t cols, int elem) {
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
#pragma omp parallel for if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) std::memcpy(d + (c * rows + r) * elem, s + (r * cols + c) * elem, size_t(elem));
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  if (a.numel() != b.numel())
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(a.numel()) + " values into a tensor of " +
                                std::to_string(b.numel()));
}

}  // namespace

void CpuOps::convert(const Tensor& src, Tensor& dst) {
  check_same_numel(src, dst, "convert");
  const int64_t n = src.numel();
  const Precision from = src.precision(), to = dst.precision();
  if (from == Precision::FP32 && to == Precision::BF16) convert_fp32_to_bf16(src.f32(), dst.as<uint16_t>(), n);
  else if (from == Precision::FP32 && to == Precision::FP16) convert_fp32_to_fp16(src.f32(), dst.as<uint16_t>(), n);
  else if (from == Precision::BF16 && to == Precision::FP32) convert_bf16_to_fp32(src.as<uint16_t>(), dst.f32(), n);
  else if (from == Precision::FP16 && to == Precision::FP32) convert_fp16_to_fp32(src.as<uint16_t>(), dst.f32(), n);
  else
    throw std::logic_error(std::string("convert: no conversion from ") + precision_name(from) + " to " +
                           precision_name(to) + " (fp32 <-> bf16 / fp16 only)");
}

void convert_to_sixteen_bit(const float* x, uint16_t* y, int64_t n, Precision to) {
  if (to == Precision::BF16) convert_fp32_to_bf16(x, y, n);
  else convert_fp32_to_fp16(x, y, n);
}

void require_sixteen_bit(Precision to, const char* what) {
  if (to != Precision::BF16 && to != Precision::FP16)
    throw std::logic_error(std::string(what) + ": " + precision_name(to) + " is not a 16-bit format (BF16 or FP16)");
}

// Per chunk of 2048 values: the masked values into an L1 buffer, then the vectorized converter
// (the bits of relu_backward then convert, without the FP32 tensor between them).
void CpuOps::relu_backward_convert(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  check_same_numel(dy, dx, "relu_backward_convert");
  check_same_numel(dy, mask, "relu_backward_convert");
  const Precision to = dx.precision();
  require_sixteen_bit(to, "relu_backward_convert");
  constexpr int64_t CHUNK = 2048;
  const int64_t n = dy.numel(), chunks = (n + CHUNK - 1) / CHUNK;
  const float* g = dy.f32();
  const uint8_t* m = mask.as<uint8_t>();
  uint16_t* out = dx.as<uint16_t>();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(64) float masked[CHUNK];
    const int64_t b = c * CHUNK, len = std::min(CHUNK, n - b);
    for (int64_t i = 0; i < len; ++i) masked[i] = m[b + i] != 0 ? g[b + i] : 0.0f;
    convert_to_sixteen_bit(masked, out + b, len, to);
  }
}

void CpuOps::round_to_sixteen_bit(Tensor& x, Precision p) {
  require_sixteen_bit(p, "round_to_sixteen_bit");
  round_buffer(x.f32(), x.numel(), p);
}

void CpuOps::quantize_int8(const Tensor& x, const Int8Quantization& spec, Tensor& q, Tensor* q_transposed) {
  check_same_numel(x, q, "quantize_int8");
  if (spec.per_row) {
    if (spec.relu_mask != nullptr) throw std::logic_error("quantize_int8: a ReLU mask with per-row scales");
    const int64_t rows = rows_of(x), cols = cols_of(x);
    std::vector<float> scales(static_cast<size_t>(rows));
    amax_rows(x.f32(), rows, cols, scales.data());
    for (float& s : scales) s = int8_scale_from_amax(s, spec.qmax);
    quantize_int8_rows(x.f32(), q.as<int8_t>(), rows, cols, scales.data(), spec.rounding, spec.seed);
    q.scale_mode = ScaleMode::PER_CHANNEL;
    q.scales = Tensor::host_scales(scales);
    if (q_transposed != nullptr)
      throw std::logic_error("quantize_int8: a transposed copy of per-row scales would be per column");
    return;
  }
  if (spec.relu_mask != nullptr) {  // masked on the fly: the bits of quantizing relu_backward's dx
    check_same_numel(x, *spec.relu_mask, "quantize_int8 (relu mask)");
    const uint8_t* m = spec.relu_mask->as<uint8_t>();
    const float a = spec.known_amax >= 0.0f ? spec.known_amax : amax_masked(x.f32(), m, x.numel());
    const float s = int8_scale_from_amax(a, spec.qmax);
    quantize_int8_masked(x.f32(), m, q.as<int8_t>(), x.numel(), s, spec.rounding, spec.seed);
    q.scale_mode = ScaleMode::PER_TENSOR;
    q.scales = Tensor::host_scales({s});
    if (q_transposed != nullptr) transpose(q, *q_transposed);
    return;
  }
  const float a = spec.known_amax >= 0.0f ? spec.known_amax : amax(x.f32(), x.numel());
  const float s = int8_scale_from_amax(a, spec.qmax);
  qsync::quantize_int8(x.f32(), q.as<int8_t>(), x.numel(), s, spec.rounding, spec.seed);
  q.scale_mode = ScaleMode::PER_TENSOR;
  q.scales = Tensor::host_scales({s});
  if (q_transposed != nullptr) transpose(q, *q_transposed);
}

void CpuOps::quantize_fp8(const Tensor& x, Tensor& q, Tensor* q_transposed) {
  check_same_numel(x, q, "quantize_fp8");
  const Precision p = q.precision();
  if (p != Precision::FP8_E4M3 && p != Precision::FP8_E5M2)
    throw std::logic_error(std::string("quantize_fp8: ") + precision_name(p) + " is not an fp8 format");
  const float s = fp8_scale_from_amax(amax(x.f32(), x.numel()), precision_traits(p).max_finite);
  if (p == Precision::FP8_E4M3) convert_fp32_to_e4m3(x.f32(), q.as<uint8_t>(), x.numel(), 1.0f / s);
  else convert_fp32_to_e5m2(x.f32(), q.as<uint8_t>(), x.numel(), 1.0f / s);
  q.scale_mode = ScaleMode::PER_TENSOR;
  q.scales = Tensor::host_scales({s});
  if (q_transposed != nullptr) transpose(q, *q_transposed);
}

void CpuOps::dequantize_int8(const Tensor& q, Tensor& out, Precision round_to) {
  check_same_numel(q, out, "dequantize_int8");
  if (q.precision() != Precision::INT8 || !q.scales)
    throw std::logic_error("dequantize_int8: the source must be INT8 with scales");
  const Precision storage = out.precision();
  const bool sixteen = storage == Precision::BF16 || storage == Precision::FP16;
  if (!sixteen && storage != Precision::FP32)
    throw std::logic_error(std::string("dequantize_int8: no output in ") + precision_name(storage));
  const int64_t rows = rows_of(q), cols = cols_of(q);
  const bool per_row = q.scale_mode == ScaleMode::PER_CHANNEL;
  const float* scales = q.scale_data();
  if (storage == Precision::BF16) {  // in one pass, no FP32 copy; rows in parallel when large
    if (!per_row) return dequantize_int8_to_bf16(q.as<int8_t>(), out.as<uint16_t>(), q.numel(), scales[0]);
#pragma omp parallel for schedule(static) if (q.numel() > (1 << 16))
    for (int64_t r = 0; r < rows; ++r)
      dequantize_int8_to_bf16(q.as<int8_t>() + r * cols, out.as<uint16_t>() + r * cols, cols, scales[r]);
    return;
  }
  // FP32 (rounded to round_to's 16-bit grid when given) or FP16 through an FP32 buffer: chunks of
  // each row (or of the whole tensor), in parallel when large (elementwise: the same bits).
  const int64_t spans = per_row ? rows : 1, count = per_row ? cols : q.numel();
  const int64_t per_span = (count + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (q.numel() > (1 << 16))
  for (int64_t k = 0; k < spans * per_span; ++k) {
    const int64_t r = k / per_span, i = (k % per_span) * CHUNK, len = std::min(CHUNK, count - i);
    const int64_t at = r * count + i;
    const float scale = scales[per_row ? r : 0];
    if (!sixteen) {
      float* dst = out.f32() + at;
      qsync::dequantize_int8(q.as<int8_t>() + at, dst, len, scale);
      if (round_to == Precision::BF16 || round_to == Precision::FP16) round_chunk(dst, len, round_to);
      continue;
    }
    float buf[CHUNK];
    qsync::dequantize_int8(q.as<int8_t>() + at, buf, len, scale);
    convert_fp32_to_fp16(buf, out.as<uint16_t>() + at, len);
  }
}

void CpuOps::transpose(const Tensor& src, Tensor& dst) {
  check_same_numel(src, dst, "transpose");
  if (src.scale_mode == ScaleMode::PER_CHANNEL)
    throw std::logic_error("transpose: per-channel scales would run along the other dimension");
  transpose_bytes(src.data(), dst.data(), rows_of(src), cols_of(src), precision_bytes(src.precision()));
  dst.scale_mode = src.scale_mode;
  dst.scales = src.scales;
}

}  // namespace qsync
