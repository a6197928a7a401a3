// File: worker/precision_ops.cpp
// The casts between FP32 and the layer precisions, on the rank's ops.
#include "worker/precision_ops.h"

#include <cmath>
#include <stdexcept>

#include "worker/layers/layer_seed.h"

namespace qsync {
namespace {

int int8_max_for(const DeviceOps& ops, OperandRole role) { return role == OperandRole::A ? ops.int8_a_operand_max() : 127; }

// (rows, cols) of a tensor's 2-D view, transposed.
Shape transposed_shape(const Tensor& t) {
  const int64_t cols = t.rank() == 0 ? 1 : t.shape().back();
  return {cols, cols > 0 ? t.numel() / cols : 0};
}

Tensor to_sixteen_bit(const Tensor& x, Precision p, StepContext& ctx, const std::string& what) {
  DeviceOps& ops = ops_of(ctx);
  Tensor out = ops.empty(x.shape(), p, ctx.memory, what);
  ops.convert(x, out);
  return out;
}

// qmax: 127, or the reduced range of A operands on CPUs without VNNI (int8_a_operand_max).
Tensor int8_per_tensor(const Tensor& x, Rounding r, uint64_t seed, int qmax, StepContext& ctx, const std::string& what,
                       Tensor* transposed = nullptr, const Tensor* relu_mask = nullptr, float known_amax = -1.0f) {
  DeviceOps& ops = ops_of(ctx);
  Tensor q = ops.empty(x.shape(), Precision::INT8, ctx.memory, what);
  if (transposed != nullptr) *transposed = ops.empty(transposed_shape(x), Precision::INT8, ctx.memory, what + " transposed");
  Int8Quantization spec;
  spec.qmax = qmax;
  spec.rounding = r;
  spec.seed = seed;
  spec.relu_mask = relu_mask;
  spec.known_amax = known_amax;
  ops.quantize_int8(x, spec, q, transposed);
  return q;
}

Tensor fp8_per_tensor(const Tensor& x, Precision p, StepContext& ctx, const std::string& what, Tensor* transposed = nullptr) {
  DeviceOps& ops = ops_of(ctx);
  Tensor q = ops.empty(x.shape(), p, ctx.memory, what);
  if (transposed != nullptr) *transposed = ops.empty(transposed_shape(x), p, ctx.memory, what + " transposed");
  ops.quantize_fp8(x, q, transposed);
  return q;
}

// The backward operand of an int8 layer in the device's 16-bit format: real 16-bit storage where
// the device computes it natively, else FP32 holding 16-bit-rounded values.
Tensor to_backward_sixteen_bit(const Tensor& x, StepContext& ctx, const std::string& what) {
  if (ctx.sixteen_bit_native) return to_sixteen_bit(x, ctx.sixteen_bit, ctx, what);
  DeviceOps& ops = ops_of(ctx);
  Tensor out = ops.empty(x.shape(), Precision::FP32, ctx.memory, what);
  ops.copy(x, out);
  ops.round_to_sixteen_bit(out, ctx.sixteen_bit);
  return out;
}

// INT8 (per tensor or per row) -> the device's 16-bit format (see to_backward_sixteen_bit).
Tensor int8_to_sixteen_bit(const Tensor& q, StepContext& ctx, const std::string& what) {
  DeviceOps& ops = ops_of(ctx);
  const bool native = ctx.sixteen_bit_native;
  Tensor out = ops.empty(q.shape(), native ? ctx.sixteen_bit : Precision::FP32, ctx.memory, what);
  ops.dequantize_int8(q, out, ctx.sixteen_bit);
  return out;
}

// Whether a quantized gradient should also be written transposed for this device's GEMMs.
bool wants_transposed(StepContext& ctx, Precision p, const Tensor* transposed) {
  return transposed != nullptr && ops_of(ctx).gemm_wants_k_contiguous(p);
}

}  // namespace

Tensor cast_activation(const Tensor& x, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return x;
  if (t.forward == Precision::TF32) return x.with_precision(Precision::TF32);  // the tensor cores round
  OpClock clock(ctx, layer + ".cast_x");
  const std::string what = layer + " input (" + t.name + ")";
  switch (t.forward) {
    case Precision::BF16:
    case Precision::FP16: return to_sixteen_bit(x, t.forward, ctx, what);
    case Precision::INT8:
      return int8_per_tensor(x, Rounding::NEAREST_EVEN, 0, int8_max_for(ops_of(ctx), role), ctx, what);
    case Precision::FP8_E4M3: return fp8_per_tensor(x, Precision::FP8_E4M3, ctx, what);
    default: throw std::logic_error("cast_activation: no cast to " + std::string(precision_name(t.forward)));
  }
}

Tensor cast_weight(const Tensor& w, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return w;
  if (t.forward == Precision::TF32) return w.with_precision(Precision::TF32);
  OpClock clock(ctx, layer + ".cast_w");
  const std::string what = layer + " weight (" + t.name + ")";
  if (t.forward != Precision::INT8) {
    return t.forward == Precision::FP8_E4M3 ? fp8_per_tensor(w, Precision::FP8_E4M3, ctx, what)
                                            : to_sixteen_bit(w, t.forward, ctx, what);
  }
  // INT8: one scale per output channel (row of w).
  DeviceOps& ops = ops_of(ctx);
  Tensor q = ops.empty(w.shape(), Precision::INT8, ctx.memory, what);
  Int8Quantization spec;
  spec.per_row = true;
  spec.qmax = int8_max_for(ops, role);
  ops.quantize_int8(w, spec, q, nullptr);
  return q;
}

Tensor cast_parameter(Parameter& w, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role) {
  if (!ctx.training) return cast_weight(w.value, p, ctx, layer, role);
  DeviceOps& ops = ops_of(ctx);
  const bool ahead = ops.optimizer_makes_int8_rows() && layer_precision_traits(p).forward == Precision::INT8;
  const int qmax = ahead ? int8_max_for(ops, role) : 0;
  if (ahead && w.int8_rows_step == ctx.step && w.int8_rows_qmax == qmax && w.int8_rows.defined() &&
      w.int8_rows.shape() == w.value.shape())
    return w.int8_rows;  // made by the optimizer step that produced this value (it rewrites it next)
  w.int8_rows_qmax = qmax;
  w.int8_rows_step = -1;
  w.int8_rows_amax = -1.0f;
  // The cast made here becomes the buffer the optimizer rewrites in place from now on (no
  // allocation in the steady state); for other precisions and devices nothing is kept.
  Tensor c = cast_weight(w.value, p, ctx, layer, role);
  w.int8_rows = ahead ? c : Tensor();
  return c;
}

bool cast_gradient_reads_relu_mask(LayerPrecision p, const StepContext& ctx) {
  const BackwardKind k = layer_precision_traits(p).backward;
  return k == BackwardKind::INT8 || (k == BackwardKind::SIXTEEN_BIT && ctx.sixteen_bit_native);
}

Precision gradient_conversion(LayerPrecision p, const StepContext& ctx) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32 || t.forward == Precision::TF32) return Precision::FP32;
  if (t.backward == BackwardKind::SAME_AS_FORWARD) return t.forward;  // to_sixteen_bit
  if (t.backward == BackwardKind::SIXTEEN_BIT && ctx.sixteen_bit_native) return ctx.sixteen_bit;
  return Precision::FP32;
}

Tensor cast_gradient(const Tensor& dy, LayerPrecision p, StepContext& ctx, const std::string& layer, Tensor* transposed,
                     const Tensor* relu_mask, float known_amax) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (relu_mask != nullptr && !cast_gradient_reads_relu_mask(p, ctx)) {  // masked first; the cast below (if any) reads the copy
    Tensor masked;
    {
      OpClock clock(ctx, layer + ".relu_backward");
      masked = ops_of(ctx).relu_masked_copy(dy, *relu_mask, ctx.memory, layer + " output gradient (relu masked)");
    }
    return cast_gradient(masked, p, ctx, layer, transposed, nullptr, known_amax);
  }
  if (t.forward == Precision::FP32) return dy;
  if (t.forward == Precision::TF32) return dy.with_precision(Precision::TF32);
  OpClock clock(ctx, layer + ".cast_dy");
  const std::string what = layer + " output gradient (" + t.name + ")";
  switch (t.backward) {
    case BackwardKind::SAME_AS_FORWARD: return to_sixteen_bit(dy, t.forward, ctx, what);
    case BackwardKind::SIXTEEN_BIT:
      if (relu_mask != nullptr) {  // native 16-bit: the masked values converted on the fly
        DeviceOps& ops = ops_of(ctx);
        Tensor out = ops.empty(dy.shape(), ctx.sixteen_bit, ctx.memory, what);
        ops.relu_backward_convert(dy, *relu_mask, out);
        return out;
      }
      return to_backward_sixteen_bit(dy, ctx, what);
    case BackwardKind::INT8:
      return int8_per_tensor(dy, Rounding::STOCHASTIC, layer_seed(ctx.seed, ctx.step, layer),
                             ops_of(ctx).int8_a_operand_max(), ctx, what,
                             wants_transposed(ctx, Precision::INT8, transposed) ? transposed : nullptr, relu_mask,
                             known_amax);
    case BackwardKind::FP8_E5M2:
      return fp8_per_tensor(dy, Precision::FP8_E5M2, ctx, what,
                            wants_transposed(ctx, Precision::FP8_E5M2, transposed) ? transposed : nullptr);
  }
  throw std::logic_error("cast_gradient: unknown backward kind");
}

Tensor backward_operand(const Tensor& saved, LayerPrecision p, StepContext& ctx, const std::string& layer) {
  if (layer_precision_traits(p).backward != BackwardKind::SIXTEEN_BIT) return saved;
  OpClock clock(ctx, layer + ".cast_saved_x");
  return int8_to_sixteen_bit(saved, ctx, layer + " saved input (16-bit)");
}

Tensor backward_weight(const Tensor& saved_w, const Parameter& master, LayerPrecision p, StepContext& ctx,
                       const std::string& layer, OperandRole role) {
  const Tensor& master_w = master.value;
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (t.forward == Precision::FP32) return master_w;
  if (t.forward == Precision::TF32) return master_w.with_precision(Precision::TF32);
  if (t.backward == BackwardKind::SIXTEEN_BIT) {
    OpClock clock(ctx, layer + ".cast_saved_w");
    return int8_to_sixteen_bit(saved_w, ctx, layer + " weight (16-bit)");
  }
  if (t.backward == BackwardKind::INT8) {
    // Per-channel scales run along the reduction dimension of dX = dY W: re-quantize per tensor.
    // The weights' amax from the optimizer's pass that made this step's INT8 rows, where it did
    // (the same value: the weights change only in the update after this backward).
    const bool amax_known = ctx.training && master.int8_rows_step == ctx.step && std::isfinite(master.int8_rows_amax) &&
                            master.int8_rows_amax >= 0.0f;
    OpClock clock(ctx, layer + ".cast_w_backward");
    return int8_per_tensor(master_w, Rounding::NEAREST_EVEN, 0, int8_max_for(ops_of(ctx), role), ctx,
                           layer + " weight (int8 per tensor)", nullptr, nullptr,
                           amax_known ? master.int8_rows_amax : -1.0f);
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

}  // namespace qsync
