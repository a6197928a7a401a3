// File: worker/layers/conv2d.cpp
// Conv2d forward and backward (im2col + the precision GEMMs of worker/precision_ops.h).
#include "worker/layers/conv2d.h"

#include <cstring>

#include "worker/layers/linear.h"
#include "worker/layers/parameter_init.h"
#include "worker/precision_ops.h"

namespace qsync {

void im2col(const void* x, int elem, int64_t s0, int64_t samples, int64_t c, int64_t h, int64_t w, int64_t k,
            int64_t stride, int64_t pad, int64_t oh, int64_t ow, void* cols) {
  const auto* src = static_cast<const uint8_t*>(x);
  auto* dst = static_cast<uint8_t*>(cols);
  const int64_t ckk = c * k * k;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < samples * oh * ow; ++row) {
    const int64_t s = s0 + row / (oh * ow), p = row % (oh * ow), y0 = (p / ow) * stride - pad, x0 = (p % ow) * stride - pad;
    uint8_t* out = dst + row * ckk * elem;
    for (int64_t ci = 0; ci < c; ++ci) {
      const uint8_t* plane = src + ((s * c + ci) * h * w) * elem;
      for (int64_t ky = 0; ky < k; ++ky) {
        const int64_t yy = y0 + ky;
        for (int64_t kx = 0; kx < k; ++kx, out += elem) {
          const int64_t xx = x0 + kx;
          if (yy < 0 || yy >= h || xx < 0 || xx >= w) std::memset(out, 0, size_t(elem));
          else std::memcpy(out, plane + (yy * w + xx) * elem, size_t(elem));
        }
      }
    }
  }
}

void col2im_add(const float* cols, int64_t s0, int64_t samples, int64_t c, int64_t h, int64_t w, int64_t k,
                int64_t stride, int64_t pad, int64_t oh, int64_t ow, float* dx) {
  const int64_t ckk = c * k * k;
  // One thread per (sample, channel) plane: no two threads write the same dx element.
#pragma omp parallel for schedule(static)
  for (int64_t sc = 0; sc < samples * c; ++sc) {
    const int64_t s = sc / c, ci = sc % c;
    float* plane = dx + ((s0 + s) * c + ci) * h * w;
    for (int64_t p = 0; p < oh * ow; ++p) {
      const float* in = cols + (s * oh * ow + p) * ckk + ci * k * k;
      const int64_t y0 = (p / ow) * stride - pad, x0 = (p % ow) * stride - pad;
      for (int64_t ky = 0; ky < k; ++ky) {
        const int64_t yy = y0 + ky;
        if (yy < 0 || yy >= h) continue;
        for (int64_t kx = 0; kx < k; ++kx) {
          const int64_t xx = x0 + kx;
          if (xx >= 0 && xx < w) plane[yy * w + xx] += in[ky * k + kx];
        }
      }
    }
  }
}

Conv2dLayer::Conv2dLayer(const LayerDesc& d, MemoryAccount* memory)
    : Layer(d), c_(d.in_shape.at(0)), h_(d.in_shape.at(1)), w_(d.in_shape.at(2)), o_(d.out),
      oh_(d.out_shape.at(1)), ow_(d.out_shape.at(2)), k_(d.kernel), stride_(d.stride), pad_(d.padding) {
  const int64_t ckk = c_ * k_ * k_;
  weight_ = parameter_allocate(d.name + ".weight", {o_, ckk}, true, memory);
  if (d.bias)
    bias_ = parameter_allocate(d.name + ".bias", {o_}, false, memory);
}

void Conv2dLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (bias_.value.defined()) out.push_back(&bias_);
}

void Conv2dLayer::init_parameters(std::mt19937_64& rng) {
  init_uniform(weight_.value, float(1.0 / std::sqrt(double(c_ * k_ * k_))), rng);
  if (bias_.value.defined()) init_uniform(bias_.value, float(1.0 / std::sqrt(double(c_ * k_ * k_))), rng);
}

int64_t Conv2dLayer::saved_bytes() const {
  return (x_saved_.defined() ? x_saved_.bytes() : 0) +
         (w_saved_.defined() && precision_ != LayerPrecision::FP32 ? w_saved_.bytes() : 0);
}

// Samples per im2col chunk: about 4096 GEMM rows, so the columns stay in L2 and the GEMM is tall.
int64_t Conv2dLayer::chunk_samples() const { return std::max<int64_t>(1, 4096 / (oh_ * ow_)); }

// ---------------------------------------------------------------------------------------------
// forward: per chunk of S samples, cols (S*H'W', CKK) = im2col(x); y_rows (S*H'W', O) = cols W^T;
// y (S, O, H', W') = transpose(y_rows) + b

Tensor Conv2dLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t batch = x.dim(0), hw = oh_ * ow_, ckk = c_ * k_ * k_;
  const Tensor xc = cast_activation(x, precision_, ctx, name());  // (B, C, H, W) forward precision
  const Tensor wc = cast_weight(weight_.value, precision_, ctx, name());
  Tensor y = Tensor::empty({batch, o_, oh_, ow_}, Precision::FP32, ctx.memory, name() + " output");
  const int64_t chunk = chunk_samples();
  const int elem = precision_bytes(xc.precision());
  Tensor cols = Tensor::empty({chunk * hw, ckk}, xc.precision(), ctx.memory, name() + " im2col");
  cols.scale_mode = xc.scale_mode;
  cols.scales = xc.scales;
  Tensor y_rows = Tensor::empty({chunk * hw, o_}, Precision::FP32, ctx.memory, name() + " output rows");
  const float* b = bias_.value.defined() ? bias_.value.f32() : nullptr;
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    im2col(xc.data(), elem, s0, n, c_, h_, w_, k_, stride_, pad_, oh_, ow_, cols.data());
    const Tensor cols_n = cols.prefix({n * hw, ckk});
    {
      OpClock clock(ctx, name() + ".gemm_forward");
      matmul(cols_n, Transpose::NO, wc, Transpose::YES, y_rows.f32(), 0.0f);  // (n*H'W', O)
    }
    float* yp = y.f32() + s0 * o_ * hw;
    const float* r = y_rows.f32();
    for (int64_t s = 0; s < n; ++s)
      for (int64_t oc = 0; oc < o_; ++oc) {
        float* dst = yp + (s * o_ + oc) * hw;
        const float bias = b ? b[oc] : 0.0f;
        for (int64_t p = 0; p < hw; ++p) dst[p] = r[(s * hw + p) * o_ + oc] + bias;
      }
  }
  if (ctx.training) {
    x_saved_ = xc;
    w_saved_ = wc;
  }
  return y;
}

// backward: per chunk, g_rows (S*H'W', O) = transpose(dy); dcols = g_rows W; dx += col2im(dcols);
// dW (O, CKK) += g_rows^T cols; db (O) += sum dy

Tensor Conv2dLayer::backward(const Tensor& dy, StepContext& ctx) {
  if (!x_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  const int64_t batch = dy.dim(0), hw = oh_ * ow_, ckk = c_ * k_ * k_;
  Tensor dx = Tensor::zeros({batch, c_, h_, w_}, Precision::FP32, ctx.memory, name() + " input gradient");
  const Tensor xb = backward_operand(x_saved_, precision_, ctx, name());  // (B, C, H, W)
  const Tensor wb = backward_weight(w_saved_, weight_.value, precision_, ctx, name());
  const int64_t chunk = chunk_samples();
  const int elem = precision_bytes(xb.precision());
  const float* g = dy.f32();
  if (bias_.value.defined()) {
    float* db = bias_.grad.f32();
    for (int64_t s = 0; s < batch; ++s)
      for (int64_t oc = 0; oc < o_; ++oc)
        for (int64_t p = 0; p < hw; ++p) db[oc] += g[(s * o_ + oc) * hw + p];
  }
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    Tensor g_rows = Tensor::empty({n * hw, o_}, Precision::FP32, ctx.memory, name() + " gradient rows");
    float* gr = g_rows.f32();
    for (int64_t s = 0; s < n; ++s)
      for (int64_t oc = 0; oc < o_; ++oc)
        for (int64_t p = 0; p < hw; ++p) gr[(s * hw + p) * o_ + oc] = g[((s0 + s) * o_ + oc) * hw + p];
    const Tensor gc = cast_gradient(g_rows, precision_, ctx, name());
    Tensor dcols = Tensor::empty({n * hw, ckk}, Precision::FP32, ctx.memory, name() + " column gradient");
    {
      OpClock clock(ctx, name() + ".gemm_input_grad");
      matmul(gc, Transpose::NO, wb, Transpose::NO, dcols.f32(), 0.0f);
    }
    col2im_add(dcols.f32(), s0, n, c_, h_, w_, k_, stride_, pad_, oh_, ow_, dx.f32());
    Tensor cols = Tensor::empty({n * hw, ckk}, xb.precision(), ctx.memory, name() + " im2col");
    cols.scale_mode = xb.scale_mode;
    cols.scales = xb.scales;
    im2col(xb.data(), elem, s0, n, c_, h_, w_, k_, stride_, pad_, oh_, ow_, cols.data());
    OpClock clock(ctx, name() + ".gemm_weight_grad");
    matmul(gc, Transpose::YES, cols, Transpose::NO, weight_.grad.f32(), 1.0f);
  }
  x_saved_ = Tensor();
  w_saved_ = Tensor();
  return dx;
}

}  // namespace qsync
