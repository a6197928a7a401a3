// File: worker/precision_ops.cpp
// Casts between FP32 and the layer precisions, and the tensor-level matmul.
#include "worker/precision_ops.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/float_convert.h"
#include "kernels/gemm_registry.h"
#include "kernels/quantize.h"
#include "worker/layers/layer_seed.h"

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.shape().back(); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.shape().back(); }

Tensor to_sixteen_bit(const Tensor& x, Precision p, StepContext& ctx, const std::string& what) {
  Tensor out = Tensor::empty(x.shape(), p, ctx.memory, what);
  if (p == Precision::BF16) convert_fp32_to_bf16(x.f32(), out.as<uint16_t>(), x.numel());
  else if (p == Precision::FP16) convert_fp32_to_fp16(x.f32(), out.as<uint16_t>(), x.numel());
  else throw std::logic_error("to_sixteen_bit: " + std::string(precision_name(p)) + " is not a 16-bit format");
  return out;
}

// qmax: 127, or the reduced range of A operands on CPUs without VNNI (cpu_int8_activation_max).
Tensor int8_per_tensor(const Tensor& x, Rounding r, uint64_t seed, int qmax, StepContext& ctx, const std::string& what) {
  Tensor q = Tensor::empty(x.shape(), Precision::INT8, ctx.memory, what);
  const float s = int8_scale_from_amax(amax(x.f32(), x.numel()), qmax);
  quantize_int8(x.f32(), q.as<int8_t>(), x.numel(), s, r, seed);
  q.scale_mode = ScaleMode::PER_TENSOR;
  q.scales = {s};
  return q;
}

Tensor fp8_per_tensor(const Tensor& x, Precision p, StepContext& ctx, const std::string& what) {
  Tensor q = Tensor::empty(x.shape(), p, ctx.memory, what);
  const float s = fp8_scale_from_amax(amax(x.f32(), x.numel()), precision_traits(p).max_finite);
  if (p == Precision::FP8_E4M3) convert_fp32_to_e4m3(x.f32(), q.as<uint8_t>(), x.numel(), 1.0f / s);
  else convert_fp32_to_e5m2(x.f32(), q.as<uint8_t>(), x.numel(), 1.0f / s);
  q.scale_mode = ScaleMode::PER_TENSOR;
  q.scales = {s};
  return q;
}

// Rounds FP32 values to the 16-bit format p and back, in place, in cache-sized chunks.
void round_to_sixteen_bit(float* x, int64_t n, Precision p) {
  constexpr int64_t CHUNK = 4096;
  uint16_t buf[CHUNK];
  for (int64_t i = 0; i < n; i += CHUNK) {
    const int64_t len = std::min(CHUNK, n - i);
    if (p == Precision::BF16) {
      convert_fp32_to_bf16(x + i, buf, len);
      convert_bf16_to_fp32(buf, x + i, len);
    } else {
      convert_fp32_to_fp16(x + i, buf, len);
      convert_fp16_to_fp32(buf, x + i, len);
    }
  }
}

// The backward operand of an int8 layer in the device's 16-bit format: real 16-bit storage where
// the device computes it natively, else FP32 holding 16-bit-rounded values.
Tensor to_backward_sixteen_bit(const Tensor& x, StepContext& ctx, const std::string& what) {
  if (ctx.sixteen_bit_native) return to_sixteen_bit(x, ctx.sixteen_bit, ctx, what);
  Tensor out = x.clone(ctx.memory, what);
  round_to_sixteen_bit(out.f32(), out.numel(), ctx.sixteen_bit);
  return out;
}

// INT8 (per tensor or per row) -> the device's 16-bit format (see to_backward_sixteen_bit), in
// cache-sized chunks through an FP32 buffer.
Tensor int8_to_sixteen_bit(const Tensor& q, StepContext& ctx, const std::string& what) {
  const Precision p = ctx.sixteen_bit;
  const bool native = ctx.sixteen_bit_native;
  Tensor out = Tensor::empty(q.shape(), native ? p : Precision::FP32, ctx.memory, what);
  const int64_t rows = rows_of(q), cols = cols_of(q);
  const bool per_row = q.scale_mode == ScaleMode::PER_CHANNEL;
  constexpr int64_t CHUNK = 4096;
  float buf[CHUNK];
  for (int64_t r = 0; r < (per_row ? rows : 1); ++r) {
    const int64_t begin = per_row ? r * cols : 0, count = per_row ? cols : q.numel();
    const float scale = q.scales[per_row ? size_t(r) : 0];
    for (int64_t i = 0; i < count; i += CHUNK) {
      const int64_t len = std::min(CHUNK, count - i);
      if (!native) {
        float* dst = out.f32() + begin + i;
        dequantize_int8(q.as<int8_t>() + begin + i, dst, len, scale);
        round_to_sixteen_bit(dst, len, p);
        continue;
      }
      dequantize_int8(q.as<int8_t>() + begin + i, buf, len, scale);
      uint16_t* dst = out.as<uint16_t>() + begin + i;
      if (p == Precision::BF16) convert_fp32_to_bf16(buf, dst, len);
      else convert_fp32_to_fp16(buf, dst, len);
    }
  }
  return out;
}

int int8_max_for(OperandRole role) { return role == OperandRole::A ? cpu_int8_activation_max() : 127; }

}  // namespace

OpClock::OpClock(StepContext& c, std::string n) : ctx(c), name(std::move(n)), start(ctx.timer ? now_seconds() : 0) {}
OpClock::~OpClock() {
  if (ctx.timer) ctx.timer->record(name, now_seconds() - start);
}

Tensor cast_activation(const Tensor& x, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return x;
  OpClock clock(ctx, layer + ".cast_x");
  const std::string what = layer + " input (" + t.name + ")";
  switch (t.forward) {
    case Precision::BF16:
    case Precision::FP16: return to_sixteen_bit(x, t.forward, ctx, what);
    case Precision::INT8: return int8_per_tensor(x, Rounding::NEAREST_EVEN, 0, int8_max_for(role), ctx, what);
    case Precision::FP8_E4M3: return fp8_per_tensor(x, Precision::FP8_E4M3, ctx, what);
    default: throw std::logic_error("cast_activation: no cast to " + std::string(precision_name(t.forward)));
  }
}

Tensor cast_weight(const Tensor& w, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return w;
  OpClock clock(ctx, layer + ".cast_w");
  const std::string what = layer + " weight (" + t.name + ")";
  if (t.forward != Precision::INT8) {
    return t.forward == Precision::FP8_E4M3 ? fp8_per_tensor(w, Precision::FP8_E4M3, ctx, what)
                                            : to_sixteen_bit(w, t.forward, ctx, what);
  }
  // INT8: one scale per output channel (row of w).
  const int64_t rows = rows_of(w), cols = cols_of(w);
  Tensor q = Tensor::empty(w.shape(), Precision::INT8, ctx.memory, what);
  q.scales.resize(size_t(rows));
  amax_rows(w.f32(), rows, cols, q.scales.data());
  for (float& s : q.scales) s = int8_scale_from_amax(s, int8_max_for(role));
  quantize_int8_rows(w.f32(), q.as<int8_t>(), rows, cols, q.scales.data(), Rounding::NEAREST_EVEN, 0);
  q.scale_mode = ScaleMode::PER_CHANNEL;
  return q;
}

Tensor cast_gradient(const Tensor& dy, LayerPrecision p, StepContext& ctx, const std::string& layer) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return dy;
  OpClock clock(ctx, layer + ".cast_dy");
  const std::string what = layer + " output gradient (" + t.name + ")";
  switch (t.backward) {
    case BackwardKind::SAME_AS_FORWARD: return to_sixteen_bit(dy, t.forward, ctx, what);
    case BackwardKind::SIXTEEN_BIT: return to_backward_sixteen_bit(dy, ctx, what);
    case BackwardKind::INT8:
      return int8_per_tensor(dy, Rounding::STOCHASTIC, layer_seed(ctx.seed, ctx.step, layer), cpu_int8_activation_max(),
                             ctx, what);
    case BackwardKind::FP8_E5M2: return fp8_per_tensor(dy, Precision::FP8_E5M2, ctx, what);
  }
  throw std::logic_error("cast_gradient: unknown backward kind");
}

Tensor backward_operand(const Tensor& saved, LayerPrecision p, StepContext& ctx, const std::string& layer) {
  if (layer_precision_traits(p).backward != BackwardKind::SIXTEEN_BIT) return saved;
  OpClock clock(ctx, layer + ".cast_saved_x");
  return int8_to_sixteen_bit(saved, ctx, layer + " saved input (16-bit)");
}

Tensor backward_weight(const Tensor& saved_w, const Tensor& master_w, LayerPrecision p, StepContext& ctx,
                       const std::string& layer, OperandRole role) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return master_w;
  if (t.backward == BackwardKind::SIXTEEN_BIT) {
    OpClock clock(ctx, layer + ".cast_saved_w");
    return int8_to_sixteen_bit(saved_w, ctx, layer + " weight (16-bit)");
  }
  if (t.backward == BackwardKind::INT8) {
    // Per-channel scales run along the reduction dimension of dX = dY W: re-quantize per tensor.
    OpClock clock(ctx, layer + ".cast_w_backward");
    return int8_per_tensor(master_w, Rounding::NEAREST_EVEN, 0, int8_max_for(role), ctx, layer + " weight (int8 per tensor)");
  }
  return saved_w;
}

void set_sixteen_bit_for(const DeviceClass& c, StepContext& ctx) {
  for (const PrecisionCapability& p : device_class_capabilities(c))
    if (p.precision == Precision::BF16 && p.level == SupportLevel::NATIVE) {
      ctx.sixteen_bit = Precision::BF16;
      ctx.sixteen_bit_native = true;
      return;
    }
  ctx.sixteen_bit = Precision::FP16;
  ctx.sixteen_bit_native = c.kind == DeviceKind::CUDA;
}

void matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float* c, float beta) {
  const int64_t ra = rows_of(a), ca = cols_of(a), rb = rows_of(b), cb = cols_of(b);
  const bool a_t = ta == Transpose::YES, b_t = tb == Transpose::YES;
  GemmDesc d;
  d.m = a_t ? ca : ra;
  d.k = a_t ? ra : ca;
  d.n = b_t ? rb : cb;
  const int64_t kb = b_t ? cb : rb;
  if (kb != d.k)
    throw std::invalid_argument("matmul: inner dimensions differ: op(a) is (" + std::to_string(d.m) + ", " +
                                std::to_string(d.k) + "), op(b) has " + std::to_string(kb) + " rows");
  auto operand = [](const Tensor& t, Transpose tr, bool channel_ok) {
    GemmOperand o{t.data(), t.precision(), tr, cols_of(t), t.scale_mode, t.scales.empty() ? nullptr : t.scales.data()};
    if (t.scale_mode == ScaleMode::PER_CHANNEL && !channel_ok)
      throw std::logic_error("matmul: per-channel scales must lie along the output (rows of op(a), columns of op(b))");
    return o;
  };
  d.a = operand(a, ta, !a_t);
  d.b = operand(b, tb, b_t);
  d.c = c;
  d.ldc = d.n;
  d.beta = beta;
  gemm_backend_for_host(gemm_signature(d)).gemm(d);
}

}  // namespace qsync
