// File: worker/layers/pool.cpp
// Max pooling (argmax saved for backward) and global average pooling.
#include "worker/layers/pool.h"

#include <limits>
#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

// ---------------------------------------------------------------------------------------------
// MaxPool2d

MaxPool2dLayer::MaxPool2dLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() != 3)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d needs an image input (C, H, W), got " +
                                tensor_shape_string(d.in_shape));
  if (d.kernel < 1 || d.stride < 1 || d.padding < 0 || 2 * d.padding > d.kernel)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d needs kernel >= 1, stride >= 1 and " +
                                "0 <= padding <= kernel / 2 (kernel " + std::to_string(d.kernel) + ", stride " +
                                std::to_string(d.stride) + ", padding " + std::to_string(d.padding) + ")");
  C_ = d.in_shape[0];
  H_ = d.in_shape[1];
  W_ = d.in_shape[2];
  if (H_ + 2 * d.padding < d.kernel || W_ + 2 * d.padding < d.kernel)
    throw std::invalid_argument("layer '" + d.name + "': maxpool2d kernel " + std::to_string(d.kernel) +
                                " is larger than the padded input " + tensor_shape_string(d.in_shape));
  Ho_ = (H_ + 2 * d.padding - d.kernel) / d.stride + 1;
  Wo_ = (W_ + 2 * d.padding - d.kernel) / d.stride + 1;
  check_resolved_shape(d.out_shape, {C_, Ho_, Wo_}, d.name, "out_shape");
  desc_.out_shape = {C_, Ho_, Wo_};
}

Tensor MaxPool2dLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  const int64_t K = desc_.kernel, S = desc_.stride, P = desc_.padding;
  Tensor y = Tensor::empty({B, C_, Ho_, Wo_}, Precision::FP32, ctx.memory, name() + ".out");  // (B, C, Ho, Wo)
  argmax_ = Tensor();
  int32_t* ap = nullptr;
  if (ctx.training) {
    argmax_ = Tensor::empty({B, C_, Ho_, Wo_}, Precision::FP32, ctx.memory, name() + ".argmax");
    ap = argmax_.as<int32_t>();
  }
  const float* xp = x.f32();
  float* yp = y.f32();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C_; ++c) {
      const float* plane = xp + (b * C_ + c) * H_ * W_;  // (H, W)
      const int64_t out_base = (b * C_ + c) * Ho_ * Wo_;
      for (int64_t oh = 0; oh < Ho_; ++oh)
        for (int64_t ow = 0; ow < Wo_; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_index = -1;
          for (int64_t kh = 0; kh < K; ++kh) {
            const int64_t h = oh * S - P + kh;
            if (h < 0 || h >= H_) continue;
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t w = ow * S - P + kw;
              if (w < 0 || w >= W_) continue;
              const float v = plane[h * W_ + w];
              // NaN propagates (as in PyTorch): a NaN wins over any number.
              if (best_index < 0 || v > best || (v != v && best == best)) {
                best = v;
                best_index = h * W_ + w;
              }
            }
          }
          yp[out_base + oh * Wo_ + ow] = best;
          if (ap) ap[out_base + oh * Wo_ + ow] = int32_t(best_index);
        }
    }
  return y;
}

Tensor MaxPool2dLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  if (!argmax_.defined() || argmax_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  Tensor dx = Tensor::zeros({B, C_, H_, W_}, Precision::FP32, ctx.memory, name() + ".dx");  // (B, C, H, W)
  const float* dyp = dy.f32();
  const int32_t* ap = argmax_.as<int32_t>();
  float* dxp = dx.f32();
  // Each (b, c) plane is owned by one thread; overlapping windows add in a fixed order.
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C_; ++c) {
      const int64_t out_base = (b * C_ + c) * Ho_ * Wo_;
      float* plane = dxp + (b * C_ + c) * H_ * W_;
      for (int64_t o = 0; o < Ho_ * Wo_; ++o) plane[ap[out_base + o]] += dyp[out_base + o];
    }
  argmax_ = Tensor();
  return dx;
}

// ---------------------------------------------------------------------------------------------
// GlobalAvgPool

GlobalAvgPoolLayer::GlobalAvgPoolLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.in_shape.size() == 3) {  // (C, H, W)
    channels_ = d.in_shape[0];
    positions_ = d.in_shape[1] * d.in_shape[2];
  } else if (d.in_shape.size() == 2) {  // (T, C)
    tokens_ = true;
    positions_ = d.in_shape[0];
    channels_ = d.in_shape[1];
  } else {
    throw std::invalid_argument("layer '" + d.name + "': global_avg_pool needs (C, H, W) or (T, C), got " +
                                tensor_shape_string(d.in_shape));
  }
  if (positions_ < 1)
    throw std::invalid_argument("layer '" + d.name + "': global_avg_pool over an empty input " +
                                tensor_shape_string(d.in_shape));
  check_resolved_shape(d.out_shape, {channels_}, d.name, "out_shape");
  desc_.out_shape = {channels_};
}

Tensor GlobalAvgPoolLayer::forward(const Tensor& x, StepContext& ctx) {
  const int64_t B = check_batched(x, desc_.in_shape, name(), "input");
  const int64_t C = channels_, N = positions_;
  Tensor y = Tensor::empty({B, C}, Precision::FP32, ctx.memory, name() + ".out");  // (B, C)
  const float* xp = x.f32();
  float* yp = y.f32();
  const float inv = 1.0f / float(N);
#pragma omp parallel for if (x.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = xp + b * C * N;
    float* yb = yp + b * C;
    if (tokens_) {  // xb: (T, C)
      for (int64_t c = 0; c < C; ++c) yb[c] = 0.0f;
      for (int64_t t = 0; t < N; ++t)
        for (int64_t c = 0; c < C; ++c) yb[c] += xb[t * C + c];
      for (int64_t c = 0; c < C; ++c) yb[c] *= inv;
    } else {  // xb: (C, H * W)
      for (int64_t c = 0; c < C; ++c) {
        float s = 0.0f;
        for (int64_t i = 0; i < N; ++i) s += xb[c * N + i];
        yb[c] = s * inv;
      }
    }
  }
  return y;
}

Tensor GlobalAvgPoolLayer::backward(const Tensor& dy, StepContext& ctx) {
  const int64_t B = check_batched(dy, desc_.out_shape, name(), "dy");
  const int64_t C = channels_, N = positions_;
  Tensor dx = Tensor::empty(batched_shape(B, desc_.in_shape), Precision::FP32, ctx.memory, name() + ".dx");
  const float* dyp = dy.f32();
  float* dxp = dx.f32();
  const float inv = 1.0f / float(N);
#pragma omp parallel for if (dx.numel() > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    const float* dyb = dyp + b * C;
    float* dxb = dxp + b * C * N;
    if (tokens_) {
      for (int64_t t = 0; t < N; ++t)
        for (int64_t c = 0; c < C; ++c) dxb[t * C + c] = dyb[c] * inv;
    } else {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < N; ++i) dxb[c * N + i] = dyb[c] * inv;
    }
  }
  (void)ctx;
  return dx;
}

}  // namespace qsync
