// File: worker/layers/activation.cpp
// ReLU and exact-erf GELU: forward next to backward, one pass over B * N elements each.
#include "worker/layers/activation.h"

#include <algorithm>

#include "worker/layers/vector_math.h"

#include <cmath>
#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

namespace {

void check_elementwise_desc(LayerDesc& d) {
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  d.out_shape = d.in_shape;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ReLU

ReluLayer::ReluLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  check_elementwise_desc(desc_);
}

Tensor ReluLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  const int64_t n = x.numel();  // B * N
  Tensor y = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, N...)
  const float* xp = x.f32();
  float* yp = y.f32();
  mask_ = Tensor();
  uint8_t* mp = nullptr;
  if (ctx.training) {
    mask_ = Tensor::empty(x.shape(), Precision::INT8, ctx.memory, name() + ".mask");  // (B, N...) 0/1
    mp = mask_.as<uint8_t>();
  }
  const int64_t per_sample = B > 0 ? n / B : 0;
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = xp + b * per_sample;
    float* yb = yp + b * per_sample;
    for (int64_t i = 0; i < per_sample; ++i) yb[i] = xb[i] > 0.0f ? xb[i] : 0.0f;
    if (mp) {
      uint8_t* mb = mp + b * per_sample;
      for (int64_t i = 0; i < per_sample; ++i) mb[i] = xb[i] > 0.0f ? 1 : 0;
    }
  }
  return y;
}

Tensor ReluLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!mask_.defined() || mask_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const int64_t per_sample = B > 0 ? dy.numel() / B : 0;
  Tensor dx = Tensor::empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  const float* dyp = dy.f32();
  const uint8_t* mp = mask_.as<uint8_t>();
  float* dxp = dx.f32();
#pragma omp parallel for if (dy.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) dxp[i] = mp[i] ? dyp[i] : 0.0f;
  mask_ = Tensor();
  return dx;
}

// ---------------------------------------------------------------------------------------------
// GELU (exact): y = x * Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2));  dy/dx = Phi(x) + x * phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

namespace {
constexpr float INV_SQRT2 = 0.70710678118654752440f;
constexpr float INV_SQRT_2PI = 0.39894228040143267794f;
}  // namespace

GeluLayer::GeluLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  check_elementwise_desc(desc_);
}

// Elementwise work runs in chunks through the vector erf/exp of vector_math.h.
constexpr int64_t GELU_CHUNK = 1024;

Tensor GeluLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, N...)
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for if (n > (1 << 14)) schedule(static)
  for (int64_t c = 0; c < (n + GELU_CHUNK - 1) / GELU_CHUNK; ++c) {
    const int64_t begin = c * GELU_CHUNK, len = std::min(GELU_CHUNK, n - begin);
    float t[GELU_CHUNK];
    for (int64_t i = 0; i < len; ++i) t[i] = xp[begin + i] * INV_SQRT2;
    erf_buffer(t, t, len);
    for (int64_t i = 0; i < len; ++i) yp[begin + i] = 0.5f * xp[begin + i] * (1.0f + t[i]);
  }
  input_ = ctx.training ? x : Tensor();  // (B, N...): kept alive for backward, not copied
  return y;
}

Tensor GeluLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (!input_.defined() || input_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const int64_t n = dy.numel();
  Tensor dx = Tensor::empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  const float* xp = input_.f32();
  const float* dyp = dy.f32();
  float* dxp = dx.f32();
#pragma omp parallel for if (n > (1 << 14)) schedule(static)
  for (int64_t c = 0; c < (n + GELU_CHUNK - 1) / GELU_CHUNK; ++c) {
    const int64_t begin = c * GELU_CHUNK, len = std::min(GELU_CHUNK, n - begin);
    float cdf[GELU_CHUNK], pdf[GELU_CHUNK];
    for (int64_t i = 0; i < len; ++i) {
      cdf[i] = xp[begin + i] * INV_SQRT2;
      pdf[i] = -0.5f * xp[begin + i] * xp[begin + i];
    }
    erf_buffer(cdf, cdf, len);
    exp_buffer(pdf, pdf, len);
    for (int64_t i = 0; i < len; ++i) {
      const float x = xp[begin + i];
      dxp[begin + i] = dyp[begin + i] * (0.5f * (1.0f + cdf[i]) + x * INV_SQRT_2PI * pdf[i]);
    }
  }
  input_ = Tensor();
  return dx;
}

}  // namespace qsync
