// File: worker/ops/cuda/cuda_ops_precision.cpp
// CudaOps: the precision casts on the CUDA quantizers (bit-identical to the CPU's for equal
// inputs: kernels/cuda/quantize_cuda.h), with every scale computed and kept on the device, and
// the tensor matmul on the cuBLASLt engine.
#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/layout_cuda.h"
#include "kernels/cuda/quantize_cuda.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.shape().back(); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.shape().back(); }

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  if (a.numel() != b.numel())
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(a.numel()) + " values into a tensor of " +
                                std::to_string(b.numel()));
}

SixteenBit sixteen_of(Precision p) {
  if (p == Precision::BF16) return SixteenBit::BF16;
  if (p == Precision::FP16) return SixteenBit::FP16;
  return SixteenBit::NONE;
}

// Device scales of `count` values, unaccounted (as the CPU's host scales).
std::shared_ptr<Tensor> device_scales(const CudaOps& ops, int64_t count) {
  return std::make_shared<Tensor>(Tensor::empty({count}, Precision::FP32, nullptr, "scales", ops.device()));
}

}  // namespace

void CudaOps::convert(const Tensor& src, Tensor& dst) {
  check_same_numel(src, dst, "convert");
  const int64_t n = src.numel();
  const Precision from = src.precision(), to = dst.precision();
  if (from == Precision::FP32 && to == Precision::BF16) convert_fp32_to_bf16_cuda(src.as<float>(), dst.as<uint16_t>(), n, stream_);
  else if (from == Precision::FP32 && to == Precision::FP16) convert_fp32_to_fp16_cuda(src.as<float>(), dst.as<uint16_t>(), n, stream_);
  else if (from == Precision::BF16 && to == Precision::FP32) convert_bf16_to_fp32_cuda(src.as<uint16_t>(), dst.as<float>(), n, stream_);
  else if (from == Precision::FP16 && to == Precision::FP32) convert_fp16_to_fp32_cuda(src.as<uint16_t>(), dst.as<float>(), n, stream_);
  else
    throw std::logic_error(std::string("convert: no conversion from ") + precision_name(from) + " to " +
                           precision_name(to) + " (fp32 <-> bf16 / fp16 only)");
}

void CudaOps::round_to_sixteen_bit(Tensor& x, Precision p) {
  if (sixteen_of(p) == SixteenBit::NONE)
    throw std::logic_error(std::string("round_to_sixteen_bit: ") + precision_name(p) + " is not a 16-bit format");
  round_to_sixteen_bit_cuda(x.as<float>(), x.numel(), sixteen_of(p), stream_);
}

// The masked gradient through an FP32 copy (the relu kernel), then the conversion.
void CudaOps::relu_backward_convert(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  convert(relu_masked_copy(dy, mask, nullptr, "relu gradient (fp32)"), dx);
}

void CudaOps::quantize_int8(const Tensor& x, const Int8Quantization& spec, Tensor& q, Tensor* q_transposed) {
  check_same_numel(x, q, "quantize_int8");
  if (spec.relu_mask != nullptr) {  // masked first through an FP32 copy (the relu kernel)
    if (spec.per_row) throw std::logic_error("quantize_int8: a ReLU mask with per-row scales");
    Int8Quantization plain = spec;
    plain.relu_mask = nullptr;
    return quantize_int8(relu_masked_copy(x, *spec.relu_mask, nullptr, "relu gradient (fp32)"), plain, q, q_transposed);
  }
  require_here(x, "quantize_int8");
  const int64_t rows = rows_of(x), cols = cols_of(x);
  if (spec.per_row) {
    if (q_transposed != nullptr)
      throw std::logic_error("quantize_int8: a transposed copy of per-row scales would be per column");
    Tensor amax = scratch(rows * 4, "row amax");
    amax_rows_cuda(x.as<float>(), rows, cols, amax.as<float>(), stream_);
    q.scales = device_scales(*this, rows);
    scales_from_amax_cuda(amax.as<float>(), q.scales->as<float>(), nullptr, rows, float(spec.qmax), stream_);
    quantize_int8_rows_cuda(x.as<float>(), q.as<int8_t>(), rows, cols, q.scale_data(), spec.rounding, spec.seed, stream_);
    q.scale_mode = ScaleMode::PER_CHANNEL;
    return;
  }
  Tensor amax = scratch(4, "amax");
  amax_cuda(x.as<float>(), x.numel(), amax.as<float>(), stream_);
  q.scales = device_scales(*this, 1);
  scales_from_amax_cuda(amax.as<float>(), q.scales->as<float>(), nullptr, 1, float(spec.qmax), stream_);
  quantize_int8_2d_cuda(x.as<float>(), q.as<int8_t>(), q_transposed ? q_transposed->as<int8_t>() : nullptr, rows, cols,
                        q.scale_data(), spec.rounding, spec.seed, stream_);
  q.scale_mode = ScaleMode::PER_TENSOR;
  if (q_transposed != nullptr) {
    q_transposed->scale_mode = ScaleMode::PER_TENSOR;
    q_transposed->scales = q.scales;
  }
}

void CudaOps::quantize_fp8(const Tensor& x, Tensor& q, Tensor* q_transposed) {
  check_same_numel(x, q, "quantize_fp8");
  require_here(x, "quantize_fp8");
  const Precision p = q.precision();
  if (p != Precision::FP8_E4M3 && p != Precision::FP8_E5M2)
    throw std::logic_error(std::string("quantize_fp8: ") + precision_name(p) + " is not an fp8 format");
  Tensor amax = scratch(4, "amax");
  Tensor inv = scratch(4, "inverse scale");
  amax_cuda(x.as<float>(), x.numel(), amax.as<float>(), stream_);
  q.scales = device_scales(*this, 1);
  scales_from_amax_cuda(amax.as<float>(), q.scales->as<float>(), inv.as<float>(), 1, precision_traits(p).max_finite,
                        stream_);
  quantize_fp8_2d_cuda(x.as<float>(), q.as<uint8_t>(), q_transposed ? q_transposed->as<uint8_t>() : nullptr, rows_of(x),
                       cols_of(x), inv.as<float>(), p == Precision::FP8_E4M3, stream_);
  q.scale_mode = ScaleMode::PER_TENSOR;
  if (q_transposed != nullptr) {
    q_transposed->scale_mode = ScaleMode::PER_TENSOR;
    q_transposed->scales = q.scales;
  }
}

void CudaOps::dequantize_int8(const Tensor& q, Tensor& out, Precision round_to) {
  check_same_numel(q, out, "dequantize_int8");
  if (q.precision() != Precision::INT8 || !q.scales)
    throw std::logic_error("dequantize_int8: the source must be INT8 with scales");
  const bool per_row = q.scale_mode == ScaleMode::PER_CHANNEL;
  const int64_t rows = rows_of(q), cols = cols_of(q);
  const Precision storage = out.precision();
  if (storage == Precision::FP32)
    dequantize_int8_to_fp32_cuda(q.as<int8_t>(), out.as<float>(), rows, cols, q.scale_data(), per_row,
                                 sixteen_of(round_to), stream_);
  else if (sixteen_of(storage) != SixteenBit::NONE)
    dequantize_int8_to_sixteen_cuda(q.as<int8_t>(), out.as<uint16_t>(), rows, cols, q.scale_data(), per_row,
                                    sixteen_of(storage), stream_);
  else
    throw std::logic_error(std::string("dequantize_int8: no output in ") + precision_name(storage));
}

void CudaOps::transpose(const Tensor& src, Tensor& dst) {
  check_same_numel(src, dst, "transpose");
  if (src.scale_mode == ScaleMode::PER_CHANNEL)
    throw std::logic_error("transpose: per-channel scales would run along the other dimension");
  transpose_cuda(src.data(), dst.data(), 1, rows_of(src), cols_of(src), precision_bytes(src.precision()), stream_);
  dst.scale_mode = src.scale_mode;
  dst.scales = src.scales;
}

bool CudaOps::gemm_wants_k_contiguous(Precision p) const {
  return p == Precision::INT8 || p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2;
}

void CudaOps::matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& c, const MatmulOptions& o) {
  require_here(a, "matmul");
  require_here(b, "matmul");
  require_here(c, "matmul");
  const int64_t ra = rows_of(a), ca = cols_of(a), rb = rows_of(b), cb = cols_of(b);
  const bool a_t = ta == Transpose::YES, b_t = tb == Transpose::YES;
  CudaMatmul mm;
  GemmDesc& d = mm.gemm;
  d.m = a_t ? ca : ra;
  d.k = a_t ? ra : ca;
  d.n = b_t ? rb : cb;
  const int64_t kb = b_t ? cb : rb;
  if (kb != d.k)
    throw std::invalid_argument("matmul: inner dimensions differ: op(a) is (" + std::to_string(d.m) + ", " +
                                std::to_string(d.k) + "), op(b) has " + std::to_string(kb) + " rows");
  if (c.numel() != d.m * d.n || c.precision() != Precision::FP32)
    throw std::invalid_argument("matmul: c must be FP32 with " + std::to_string(d.m * d.n) + " values");
  auto operand = [](const Tensor& t, Transpose tr, bool channel_ok) {
    GemmOperand op{t.data(), t.precision(), tr, cols_of(t), t.scale_mode, t.scale_data()};
    if (t.scale_mode == ScaleMode::PER_CHANNEL && !channel_ok)
      throw std::logic_error("matmul: per-channel scales must lie along the output (rows of op(a), columns of op(b))");
    return op;
  };
  d.a = operand(a, ta, !a_t);
  d.b = operand(b, tb, b_t);
  d.c = c.as<float>();
  d.ldc = d.n;
  d.beta = o.beta;
  if (o.bias != nullptr) mm.gemm.bias = o.bias->as<float>();
  if (o.row_sums_of_a != nullptr) mm.row_sums_of_a = o.row_sums_of_a->as<float>();
  matmul_->run(mm);
}

}  // namespace qsync
