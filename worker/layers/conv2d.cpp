// File: worker/layers/conv2d.cpp
// Conv2d forward and backward (im2col + the precision GEMMs of worker/precision_ops.h).
#include "worker/layers/conv2d.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "worker/layers/parameter_init.h"
#include "worker/precision_ops.h"

namespace qsync {
namespace {

// One row of cols per tap (ci, ky, kx); within it, per sample and output row, a run of ow values
// read from one input row: contiguous for stride 1, zero outside the image.
template <class T>
void im2col_typed(const T* src, int64_t s0, int64_t samples, const ConvGeometry& g, T* dst) {
  const int64_t hw = g.oh * g.ow, cols = samples * hw, taps = g.c * g.k * g.k;
#pragma omp parallel for schedule(static)
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t ci = tap / (g.k * g.k), ky = (tap / g.k) % g.k, kx = tap % g.k;
    // Output columns whose input column xx = ox*stride - pad + kx lies in [0, w).
    const int64_t lo = std::clamp<int64_t>((g.pad - kx + g.stride - 1) / g.stride, 0, g.ow);
    const int64_t hi = std::clamp<int64_t>((g.w + g.pad - kx + g.stride - 1) / g.stride, lo, g.ow);
    for (int64_t s = 0; s < samples; ++s) {
      const T* plane = src + ((s0 + s) * g.c + ci) * g.h * g.w;
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
          for (int64_t ox = lo; ox < hi; ++ox) out[ox] = in[ox];
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) out[ox] = in[ox * g.stride];
        }
        std::fill(out + hi, out + g.ow, T(0));
      }
    }
  }
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
          for (int64_t ox = lo; ox < hi; ++ox) out[ox * g.stride] += in[ox];
        }
      }
  }
}

Conv2dLayer::Conv2dLayer(const LayerDesc& d, MemoryAccount* memory)
    : Layer(d),
      g_{d.in_shape.at(0), d.in_shape.at(1), d.in_shape.at(2), d.kernel, d.stride, d.padding, d.out_shape.at(1),
         d.out_shape.at(2)},
      o_(d.out) {
  weight_ = parameter_allocate(d.name + ".weight", {o_, g_.c * g_.k * g_.k}, true, memory);
  if (d.bias) bias_ = parameter_allocate(d.name + ".bias", {o_}, false, memory);
}

void Conv2dLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (bias_.value.defined()) out.push_back(&bias_);
}

void Conv2dLayer::init_parameters(std::mt19937_64& rng) {
  const float bound = float(1.0 / std::sqrt(double(g_.c * g_.k * g_.k)));  // PyTorch's default
  init_uniform(weight_.value, bound, rng);
  if (bias_.value.defined()) init_uniform(bias_.value, bound, rng);
}

int64_t Conv2dLayer::saved_bytes() const {
  return (x_saved_.defined() ? x_saved_.bytes() : 0) +
         (w_saved_.defined() && precision_ != LayerPrecision::FP32 ? w_saved_.bytes() : 0);
}

// Samples per chunk: about 2048 GEMM columns, so a chunk's columns stay in L2.
int64_t Conv2dLayer::chunk_samples() const { return std::max<int64_t>(1, 2048 / (g_.oh * g_.ow)); }

// ---------------------------------------------------------------------------------------------
// forward: per chunk of S samples, cols (CKK, S*H'W') = im2col(x); y_cm (O, S*H'W') = W cols;
// y (S, O, H', W') = y_cm by sample, + b

Tensor Conv2dLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t batch = x.dim(0), hw = g_.oh * g_.ow, ckk = g_.c * g_.k * g_.k;
  if (ctx.observer) ctx.observer->gemm_forward(*this, x, weight_.value);  // the image: see LayerObserver
  const Tensor xc = cast_activation(x, precision_, ctx, name(), OperandRole::B);  // (B, C, H, W)
  const Tensor wc = cast_weight(weight_.value, precision_, ctx, name(), OperandRole::A);  // (O, CKK)
  Tensor y = Tensor::empty({batch, o_, g_.oh, g_.ow}, Precision::FP32, ctx.memory, name() + " output");
  const int64_t chunk = std::min(batch, chunk_samples());
  const int elem = precision_bytes(xc.precision());
  Tensor cols = Tensor::empty({ckk, chunk * hw}, xc.precision(), ctx.memory, name() + " im2col");
  Tensor y_cm = Tensor::empty({o_, chunk * hw}, Precision::FP32, ctx.memory, name() + " output (channel-major)");
  const float* b = bias_.value.defined() ? bias_.value.f32() : nullptr;
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    Tensor cols_n = cols.prefix({ckk, n * hw});  // (CKK, n*H'W')
    cols_n.scale_mode = xc.scale_mode;
    cols_n.scales = xc.scales;
    {
      OpClock clock(ctx, name() + ".im2col");
      im2col(xc.data(), elem, s0, n, g_, cols_n.data());
    }
    {
      OpClock clock(ctx, name() + ".gemm_forward");
      matmul(wc, Transpose::NO, cols_n, Transpose::NO, y_cm.f32(), 0.0f);  // (O, n*H'W')
    }
    const float* src = y_cm.f32();
    float* dst = y.f32() + s0 * o_ * hw;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t oc = 0; oc < o_; ++oc) {
        const float* row = src + oc * n * hw + s * hw;
        float* out = dst + (s * o_ + oc) * hw;
        const float bias = b ? b[oc] : 0.0f;
        for (int64_t p = 0; p < hw; ++p) out[p] = row[p] + bias;
      }
  }
  if (ctx.training) {
    x_saved_ = xc;
    w_saved_ = wc;
  }
  return y;
}

// backward: per chunk, dy_cm (O, S*H'W') = dy by channel; dcols = W^T dy_cm; dx += col2im(dcols);
// dW (O, CKK) += dy_cm cols^T; db (O) += sum dy

Tensor Conv2dLayer::backward(const Tensor& dy, StepContext& ctx) {
  if (!x_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  const int64_t batch = dy.dim(0), hw = g_.oh * g_.ow, ckk = g_.c * g_.k * g_.k;
  Tensor dx = Tensor::zeros({batch, g_.c, g_.h, g_.w}, Precision::FP32, ctx.memory, name() + " input gradient");
  const Tensor xb = backward_operand(x_saved_, precision_, ctx, name());  // (B, C, H, W)
  const Tensor wb = backward_weight(w_saved_, weight_.value, precision_, ctx, name(), OperandRole::A);
  const int64_t chunk = std::min(batch, chunk_samples());
  const int elem = precision_bytes(xb.precision());
  const float* g = dy.f32();
  if (bias_.value.defined()) {
    float* db = bias_.grad.f32();
    for (int64_t s = 0; s < batch; ++s)
      for (int64_t oc = 0; oc < o_; ++oc) {
        float sum = 0.0f;
        for (int64_t p = 0; p < hw; ++p) sum += g[(s * o_ + oc) * hw + p];
        db[oc] += sum;
      }
  }
  Tensor dy_cm = Tensor::empty({o_, chunk * hw}, Precision::FP32, ctx.memory, name() + " gradient (channel-major)");
  Tensor dcols = Tensor::empty({ckk, chunk * hw}, Precision::FP32, ctx.memory, name() + " column gradient");
  Tensor cols = Tensor::empty({ckk, chunk * hw}, xb.precision(), ctx.memory, name() + " im2col");
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    const Tensor dy_n = dy_cm.prefix({o_, n * hw});
    float* gc_rows = dy_cm.f32();
    for (int64_t oc = 0; oc < o_; ++oc)
      for (int64_t s = 0; s < n; ++s)
        std::memcpy(gc_rows + oc * n * hw + s * hw, g + ((s0 + s) * o_ + oc) * hw, size_t(hw) * sizeof(float));
    const Tensor gc = cast_gradient(dy_n, precision_, ctx, name());  // (O, n*H'W') backward precision
    {
      OpClock clock(ctx, name() + ".gemm_input_grad");
      matmul(wb, Transpose::YES, gc, Transpose::NO, dcols.f32(), 0.0f);  // (CKK, n*H'W')
    }
    {
      OpClock clock(ctx, name() + ".col2im");
      col2im_add(dcols.f32(), s0, n, g_, dx.f32());
    }
    Tensor cols_n = cols.prefix({ckk, n * hw});
    cols_n.scale_mode = xb.scale_mode;
    cols_n.scales = xb.scales;
    {
      OpClock clock(ctx, name() + ".im2col");
      im2col(xb.data(), elem, s0, n, g_, cols_n.data());
    }
    OpClock clock(ctx, name() + ".gemm_weight_grad");
    matmul(gc, Transpose::NO, cols_n, Transpose::YES, weight_.grad.f32(), 1.0f);  // (O, CKK)
  }
  if (ctx.observer) ctx.observer->gemm_backward(*this, dy, weight_.grad);
  x_saved_ = Tensor();
  w_saved_ = Tensor();
  return dx;
}

}  // namespace qsync
