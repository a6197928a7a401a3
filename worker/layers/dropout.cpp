// File: worker/layers/dropout.cpp
// Inverted dropout with a counter-based mask (see dropout.h).
#include "worker/layers/dropout.h"

#include <stdexcept>

#include "worker/layers/layer_seed.h"
#include "worker/layers/shape_check.h"

namespace qsync {

DropoutLayer::DropoutLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (!(d.p >= 0.0 && d.p <= 1.0))
    throw std::invalid_argument("layer '" + d.name + "': dropout p must be in [0, 1], got " + std::to_string(d.p));
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  desc_.out_shape = d.in_shape;
}

Tensor DropoutLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  mask_ = Tensor();
  identity_forward_ = false;
  const double p = desc_.p;
  if (!ctx.training || p == 0.0) {
    identity_forward_ = ctx.training;
    return x;
  }
  const int64_t per_sample = B > 0 ? x.numel() / B : 0;
  const float scale = p < 1.0 ? float(1.0 / (1.0 - p)) : 0.0f;
  const uint64_t key = layer_seed(ctx.seed, ctx.step, name());
  Tensor y = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");        // (B, N...)
  mask_ = Tensor::empty(x.shape(), Precision::INT8, ctx.memory, name() + ".mask");          // (B, N...)
  const float* xp = x.f32();
  float* yp = y.f32();
  uint8_t* mp = mask_.as<uint8_t>();
#pragma omp parallel for if (x.numel() > (1 << 14))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) {
      const uint8_t keep = hash_to_unit(counter_hash(key, uint64_t(i))) >= p ? 1 : 0;
      mp[i] = keep;
      yp[i] = keep ? xp[i] * scale : 0.0f;
    }
  return y;
}

Tensor DropoutLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (identity_forward_) {
    identity_forward_ = false;
    return dy;
  }
  if (!mask_.defined() || mask_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const double p = desc_.p;
  const float scale = p < 1.0 ? float(1.0 / (1.0 - p)) : 0.0f;
  const int64_t per_sample = B > 0 ? dy.numel() / B : 0;
  Tensor dx = Tensor::empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, N...)
  const float* dyp = dy.f32();
  const uint8_t* mp = mask_.as<uint8_t>();
  float* dxp = dx.f32();
#pragma omp parallel for if (dy.numel() > (1 << 14))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = b * per_sample; i < (b + 1) * per_sample; ++i) dxp[i] = mp[i] ? dyp[i] * scale : 0.0f;
  mask_ = Tensor();
  return dx;
}

}  // namespace qsync
