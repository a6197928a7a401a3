// File: worker/ops/cpu/cpu_conv.cpp
// CpuOps: Conv2d on oneDNN's direct convolution kernels where they compute the layer precision
// exactly under the class's ISA (kernels/cpu/conv_onednn.h: FP32; BF16 with BF16 instructions;
// INT8 forward and input gradient at every ISA level), else (and as the reference) as GEMM over
// im2col, in chunks of S samples whose columns fit in cache.
// Columns are (C*k*k, S*H'*W'), so im2col and col2im move contiguous image rows and the GEMMs
// produce channel-major outputs:
//   forward      y (O, S*H'W')       = W (O, CKK) cols (CKK, S*H'W')     NN, W is the A operand
//   input grad   dcols (CKK, S*H'W') = W^T dy (O, S*H'W')                 TN
//   weight grad  dW (O, CKK)        += dy (O, S*H'W') cols^T             NT
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/conv_onednn.h"
#include "kernels/cpu_isa.h"
#include "worker/layer.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

// One row of cols per tap (ci, ky, kx); within it, per sample and output row, a run of ow values
// read from one input row: contiguous for stride 1, zero outside the image. With stride 1 and
// "same" width (ow == w) a tap's rows inside the image are one shifted run of the plane: one copy,
// then the few values that ran over a row's edge are zeroed.
template <class T>
void im2col_same_width_tap(const T* plane, const ConvGeometry& g, int64_t ky, int64_t kx, int64_t lo, int64_t hi,
                           T* out) {  // out (H'*W') of one tap and sample
  const int64_t oy_lo = std::clamp<int64_t>(g.pad - ky, 0, g.oh);
  const int64_t oy_hi = std::clamp<int64_t>(g.h + g.pad - ky, oy_lo, g.oh);
  std::fill(out, out + oy_lo * g.ow, T(0));
  std::fill(out + oy_hi * g.ow, out + g.oh * g.ow, T(0));
  if (oy_hi == oy_lo) return;
  // out[oy*W' + ox] = plane[(oy - pad + ky)*W + ox - pad + kx] over [first, last)
  const int64_t first = oy_lo * g.ow + lo, last = (oy_hi - 1) * g.ow + hi;
  if (hi > lo)  // else every column is outside the image (zeroed below)
    std::memcpy(out + first, plane + (oy_lo - g.pad + ky) * g.w + lo - g.pad + kx, size_t(last - first) * sizeof(T));
  // Column by column down the rows: strided stores of the one or two edge values (a fill per row
  // would be a library call per row, for one byte each at 1-byte elements).
  for (int64_t ox = 0; ox < lo; ++ox)
    for (int64_t oy = oy_lo; oy < oy_hi; ++oy) out[oy * g.ow + ox] = T(0);
  for (int64_t ox = hi; ox < g.ow; ++ox)
    for (int64_t oy = oy_lo; oy < oy_hi; ++oy) out[oy * g.ow + ox] = T(0);
}

template <class T>
void im2col_typed(const T* src, int64_t s0, int64_t samples, const ConvGeometry& g, T* dst) {
  const int64_t hw = g.oh * g.ow, cols = samples * hw, taps = g.c * g.k * g.k;
  const bool same_width = g.stride == 1 && g.ow == g.w;
#pragma omp parallel for schedule(static)
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t ci = tap / (g.k * g.k), ky = (tap / g.k) % g.k, kx = tap % g.k;
    // Output columns whose input column xx = ox*stride - pad + kx lies in [0, w).
    const int64_t lo = std::clamp<int64_t>((g.pad - kx + g.stride - 1) / g.stride, 0, g.ow);
    const int64_t hi = std::clamp<int64_t>((g.w + g.pad - kx + g.stride - 1) / g.stride, lo, g.ow);
    for (int64_t s = 0; s < samples; ++s) {
      const T* plane = src + ((s0 + s) * g.c + ci) * g.h * g.w;
      if (same_width) {
        im2col_same_width_tap(plane, g, ky, kx, lo, hi, dst + tap * cols + s * hw);
        continue;
      }
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        T* out = dst + tap * cols + s * hw + oy * g.ow;
        const int64_t yy = oy * g.stride - g.pad + ky;
        if (yy < 0 || yy >= g.h) {
          std::fill(out, out + g.ow, T(0));
          continue;
        }
        const T* in = plane + yy * g.w - g.pad + kx;
        std::fill(out, out + lo, T(0));
        if (g.stride == 1) {
          std::memcpy(out + lo, in + lo, size_t(hi - lo) * sizeof(T));
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) out[ox] = in[ox * g.stride];
        }
        std::fill(out + hi, out + g.ow, T(0));
      }
    }
  }
}

ConvOnednnShape onednn_shape(const ConvGeometry& g, int64_t batch, int64_t o) {
  return {batch, g.c, g.h, g.w, o, g.k, g.stride, g.pad, g.oh, g.ow};
}

// The oneDNN forward of xc (B, C, H, W) and wc (O, CKK) in one precision into y (or, with y
// nullptr, for asking what it supports), or an undefined call (op BACKWARD_DATA) when the im2col
// path must run it.
ConvOnednnCall onednn_forward_call(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                                   const ConvEpilogue& epilogue, Tensor* y) {
  ConvOnednnCall c;
  c.shape = onednn_shape(g, xc.dim(0), wc.dim(0));
  c.type = xc.precision();
  c.x = xc.data();
  c.w = wc.data();
  c.bias = bias != nullptr ? bias->f32() : nullptr;
  c.out = y != nullptr ? y->f32() : nullptr;
  c.relu = epilogue.relu;
  c.relu_mask = epilogue.relu && epilogue.relu_mask != nullptr ? epilogue.relu_mask->as<uint8_t>() : nullptr;
  c.pool = epilogue.pool;
  c.pool_argmax = epilogue.pool && epilogue.pool_argmax != nullptr ? epilogue.pool_argmax->as<int32_t>() : nullptr;
  const bool int8 = c.type == Precision::INT8;
  if (wc.precision() != c.type || (int8 && (xc.scale_mode != ScaleMode::PER_TENSOR || !wc.scales))) {
    c.op = ConvOnednnOp::BACKWARD_DATA;
    return c;
  }
  if (int8) {
    c.x_scale = xc.scale_data()[0];
    c.w_scales = wc.scale_data();
    if (wc.scale_mode == ScaleMode::PER_TENSOR) {  // one scale for every output channel
      thread_local std::vector<float> repeated;
      repeated.assign(size_t(c.shape.o), wc.scale_data()[0]);
      c.w_scales = repeated.data();
    }
  }
  if (!conv_onednn_supports(c)) c.op = ConvOnednnOp::BACKWARD_DATA;
  return c;
}

// The bias pass converts dy plane by plane: below this many positions a plane's call costs more
// than the whole-tensor cast it saves (the ViT's 4x4 patch grid: 16).
constexpr int64_t MIN_CONVERTED_PLANE = 64;

// Samples per chunk: about 2048 GEMM columns, so a chunk's columns stay in L2; more while its
// im2col columns (elem bytes each) stay within 256 KiB: a layer with few taps (a first convolution
// on one channel) would otherwise run dozens of tiny weight-gradient products, each paying a
// call's start.
int64_t chunk_samples(const ConvGeometry& g, int elem) {
  const int64_t hw = g.oh * g.ow, cols_bytes = g.c * g.k * g.k * hw * elem;
  return std::max<int64_t>({1, 2048 / hw, (int64_t{256} << 10) / cols_bytes});
}

}  // namespace

void im2col(const void* x, int elem, int64_t s0, int64_t samples, const ConvGeometry& g, void* cols) {
  switch (elem) {
    case 1: return im2col_typed(static_cast<const uint8_t*>(x), s0, samples, g, static_cast<uint8_t*>(cols));
    case 2: return im2col_typed(static_cast<const uint16_t*>(x), s0, samples, g, static_cast<uint16_t*>(cols));
    case 4: return im2col_typed(static_cast<const uint32_t*>(x), s0, samples, g, static_cast<uint32_t*>(cols));
    default: throw std::invalid_argument("im2col: unsupported element size " + std::to_string(elem));
  }
}

void col2im_add(const float* src, int64_t s0, int64_t samples, const ConvGeometry& g, float* dx) {
  const int64_t hw = g.oh * g.ow, cols = samples * hw;
  // One thread per (sample, channel) plane: no two threads write the same dx element, and each
  // element's additions run in a fixed order.
#pragma omp parallel for schedule(static)
  for (int64_t sc = 0; sc < samples * g.c; ++sc) {
    const int64_t s = sc / g.c, ci = sc % g.c;
    float* plane = dx + ((s0 + s) * g.c + ci) * g.h * g.w;
    for (int64_t ky = 0; ky < g.k; ++ky)
      for (int64_t kx = 0; kx < g.k; ++kx) {
        const int64_t tap = (ci * g.k + ky) * g.k + kx;
        const int64_t lo = std::clamp<int64_t>((g.pad - kx + g.stride - 1) / g.stride, 0, g.ow);
        const int64_t hi = std::clamp<int64_t>((g.w + g.pad - kx + g.stride - 1) / g.stride, lo, g.ow);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t yy = oy * g.stride - g.pad + ky;
          if (yy < 0 || yy >= g.h) continue;
          const float* in = src + tap * cols + s * hw + oy * g.ow;
          float* out = plane + yy * g.w - g.pad + kx;
          if (g.stride == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) out[ox] += in[ox];  // contiguous: vectorized
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) out[ox * g.stride] += in[ox];
          }
        }
      }
  }
}

// The INT8 convolutions on oneDNN (NHWC sums: kernels/cpu/conv_int8_output.h).
bool CpuOps::conv2d_forward_pools(const Tensor& xc, const Tensor& wc, const ConvGeometry& g) const {
  ConvEpilogue pooled;
  pooled.pool = true;
  const ConvOnednnCall c = onednn_forward_call(xc, wc, nullptr, g, pooled, nullptr);
  return c.op == ConvOnednnOp::FORWARD && conv_onednn_pools(c);
}

// per chunk of S samples, cols (CKK, S*H'W') = im2col(x); y_cm (O, S*H'W') = W cols;
// y (S, O, H', W') = epilogue(y_cm by sample, + b)
void CpuOps::conv2d_forward(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                            const ConvEpilogue& epilogue, Tensor& y, StepContext& ctx, const std::string& layer) {
  const ConvOnednnCall direct = onednn_forward_call(xc, wc, bias, g, epilogue, &y);
  if (direct.op == ConvOnednnOp::FORWARD) {
    OpClock clock(ctx, layer + ".conv_forward");
    conv_onednn_run(direct);
    return;
  }
  if (epilogue.pool)
    throw std::logic_error("conv2d_forward: layer '" + layer + "' asked to pool in an output pass it does not run "
                           "(ask conv2d_forward_pools first)");
  const int64_t batch = xc.dim(0), hw = g.oh * g.ow, ckk = g.c * g.k * g.k, o = wc.dim(0);
  const int elem = precision_bytes(xc.precision());
  const int64_t chunk = std::min(batch, chunk_samples(g, elem));
  Tensor cols = Tensor::empty({ckk, chunk * hw}, xc.precision(), ctx.memory, layer + " im2col");
  Tensor y_cm = Tensor::empty({o, chunk * hw}, Precision::FP32, ctx.memory, layer + " output (channel-major)");
  const float* b = bias != nullptr ? bias->f32() : nullptr;
  uint8_t* mask = direct.relu_mask;  // (B, O, H', W') or nullptr
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    Tensor cols_n = cols.prefix({ckk, n * hw});  // (CKK, n*H'W')
    cols_n.scale_mode = xc.scale_mode;
    cols_n.scales = xc.scales;
    {
      OpClock clock(ctx, layer + ".im2col");
      im2col(xc.data(), elem, s0, n, g, cols_n.data());
    }
    Tensor y_n = y_cm.prefix({o, n * hw});
    {
      OpClock clock(ctx, layer + ".gemm_forward");
      matmul(wc, Transpose::NO, cols_n, Transpose::NO, y_n, {});  // (O, n*H'W')
    }
    const float* src = y_cm.f32();
    float* dst = y.f32() + s0 * o * hw;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t oc = 0; oc < o; ++oc) {
        const float* row = src + oc * n * hw + s * hw;
        float* out = dst + (s * o + oc) * hw;
        const float bv = b ? b[oc] : 0.0f;
        for (int64_t p = 0; p < hw; ++p) out[p] = row[p] + bv;
        if (!epilogue.relu) continue;
        for (int64_t p = 0; p < hw; ++p) out[p] = out[p] > 0.0f ? out[p] : 0.0f;
        if (mask == nullptr) continue;
        uint8_t* m = mask + (s0 + s) * o * hw + oc * hw;
        for (int64_t p = 0; p < hw; ++p) m[p] = out[p] > 0.0f ? 1 : 0;
      }
  }
}

namespace {

// Whether oneDNN's weight gradient of a convolution of one input channel would run in its AVX2
// kernel, which blocks input channels by eight and so leaves seven lanes of eight idle: about 7
// GMAC/s on Zen 5 (the zoo CNN's conv1, 128 x 32 x 9 x 784: 4.2 ms; the ViT's patch embedding
// 1.2 ms), where the im2col path's GEMM takes 1.2 and 0.14 ms. From AVX-512 up oneDNN's kernel
// is as fast as the im2col path with its passes (conv1: 1.3 against 1.5 ms), so it stays there.
bool onednn_weight_grad_idles_lanes(const ConvGeometry& g) { return g.c == 1 && cpu_isa_active() < CpuIsa::AVX512; }

// The backward's two oneDNN calls (input and weight gradients) when the saved operands are FP32
// or BF16 (not quantized) and oneDNN computes both convolutions of that type at its speed; false:
// the im2col path runs it.
bool onednn_backward_calls(const Conv2dBackward& a, const ConvGeometry& g, ConvOnednnCall& data,
                           ConvOnednnCall& weights) {
  const Tensor& xb = *a.x;
  const Tensor& wb = *a.w;
  const Precision type = xb.precision();
  if ((type != Precision::FP32 && type != Precision::BF16) || wb.precision() != type ||
      xb.scale_mode != ScaleMode::NONE || wb.scale_mode != ScaleMode::NONE || onednn_weight_grad_idles_lanes(g))
    return false;
  data.op = ConvOnednnOp::BACKWARD_DATA;
  weights.op = ConvOnednnOp::BACKWARD_WEIGHTS;
  data.shape = weights.shape = onednn_shape(g, a.dy->dim(0), wb.dim(0));
  data.type = weights.type = type;
  return (a.dx == nullptr || conv_onednn_supports(data)) && conv_onednn_supports(weights);
}

}  // namespace

// The backward on oneDNN (onednn_backward_calls): dy cast whole (B, O, H', W'), unless the bias
// pass converted it already (`converted`), then dx written and dW accumulated.
void CpuOps::conv2d_backward_onednn(const Conv2dBackward& a, ConvOnednnCall& data, ConvOnednnCall& weights,
                                    const Tensor& converted, StepContext& ctx, const std::string& layer) {
  const Precision type = a.x->precision();
  const Tensor gc = converted.defined() ? converted : a.cast_dy(*a.dy, a.relu_mask, -1.0f);  // (B, O, H', W')
  if (gc.precision() != type)
    throw std::logic_error("conv2d_backward: layer '" + layer + "' casts its gradient to " +
                           precision_name(gc.precision()) + " but saved its operands in " + precision_name(type));
  weights.x = a.x->data();
  weights.dy = gc.data();
  weights.out = a.dw->f32();
  if (a.dx == nullptr) {
    OpClock clock(ctx, layer + ".conv_weight_grad");
    conv_onednn_run(weights);
    return;
  }
  data.w = a.w->data();
  data.dy = gc.data();
  data.out = a.dx->f32();
  OpClock clock(ctx, layer + ".conv_backward");  // input and weight gradients, dy reordered once
  conv_onednn_run_backward(data, weights);
}

// The INT8 input gradient on oneDNN (a deconvolution of the quantized dy, per-tensor scales of dy
// and W); false when oneDNN has no kernel for the call (the im2col path computes it).
bool CpuOps::conv2d_input_grad_onednn(const Tensor& gq, const Tensor& wb, const ConvGeometry& g, Tensor& dx,
                                      StepContext& ctx, const std::string& layer) {
  if (gq.precision() != Precision::INT8 || wb.precision() != Precision::INT8 || gq.scale_mode != ScaleMode::PER_TENSOR ||
      wb.scale_mode != ScaleMode::PER_TENSOR)
    return false;
  ConvOnednnCall data;
  data.op = ConvOnednnOp::BACKWARD_DATA;
  data.shape = onednn_shape(g, gq.dim(0), wb.dim(0));
  data.type = Precision::INT8;
  if (!conv_onednn_supports(data)) return false;
  data.w = wb.data();
  data.w_scales = wb.scale_data();
  data.dy = gq.data();
  data.dy_scale = gq.scale_data()[0];
  data.out = dx.f32();
  OpClock clock(ctx, layer + ".conv_input_grad");
  conv_onednn_run(data);
  return true;
}

// On oneDNN where it computes the layer's type (FP32, BF16), else as GEMMs over im2col chunks of
// samples (conv2d_backward_chunks, cpu_conv_chunks.cpp). db (O) +=
// sum dy first, in one pass that also finds dy's amax (for an INT8 cast) and, on the oneDNN path
// with planes of MIN_CONVERTED_PLANE positions or more, writes the gradient's 16-bit conversion
// (a.dy_conversion) so dy is read once. A quantized gradient is cast whole first; its input
// gradient runs on oneDNN where it can.
void CpuOps::conv2d_backward(const Conv2dBackward& a, const ConvGeometry& g, StepContext& ctx,
                             const std::string& layer) {
  const Tensor& xb = *a.x;
  const Tensor& wb = *a.w;
  const int64_t batch = a.dy->dim(0), hw = g.oh * g.ow, o = wb.dim(0);
  ConvOnednnCall data, weights;
  const bool on_onednn = onednn_backward_calls(a, g, data, weights);
  float dy_amax = -1.0f;  // the (masked) gradient's amax when the bias pass found it
  Tensor converted;       // (B, O, H', W') the gradient's 16-bit cast, when the bias pass wrote it
  if (a.db != nullptr) {
    OpClock clock(ctx, layer + ".bias_grad");
    if (on_onednn && hw >= MIN_CONVERTED_PLANE &&
        (a.dy_conversion == Precision::BF16 || a.dy_conversion == Precision::FP16))
      converted = Tensor::empty(a.dy->shape(), a.dy_conversion, ctx.memory, layer + " output gradient (converted)");
    dy_amax = conv_bias_grad_add(a.dy->f32(), a.relu_mask != nullptr ? a.relu_mask->as<uint8_t>() : nullptr, batch,
                                 o, hw, a.db->f32(), a.dy_conversion,
                                 converted.defined() ? converted.as<uint16_t>() : nullptr);
  }
  if (on_onednn) return conv2d_backward_onednn(a, data, weights, converted, ctx, layer);
  // Saved operands with scales (int8-all, fp8): the gradient is cast whole, one scale for the
  // tensor, before any chunking, reading a fused ReLU's mask on the fly. Otherwise the chunks'
  // casts read a masked copy.
  const bool cast_whole = precision_takes_scales(xb.precision());
  Tensor masked;
  if (a.relu_mask != nullptr && !cast_whole) {
    OpClock clock(ctx, layer + ".relu_backward");
    masked = relu_masked_copy(*a.dy, *a.relu_mask, ctx.memory, layer + " output gradient (relu masked)");
  }
  const Tensor& dy = masked.defined() ? masked : *a.dy;
  const Tensor gq = cast_whole ? a.cast_dy(dy, a.relu_mask, dy_amax) : Tensor();  // (B, O, H', W') quantized
  const bool dx_on_im2col = a.dx != nullptr && !(cast_whole && conv2d_input_grad_onednn(gq, wb, g, *a.dx, ctx, layer));
  if (dx_on_im2col) fill_zero(*a.dx);
  conv2d_backward_chunks(a, g, dy, gq, dx_on_im2col, chunk_samples(g, precision_bytes(xb.precision())), ctx, layer);
}

}  // namespace qsync
