// File: worker/layers/layernorm.cpp
// LayerNorm forward/backward in the manner of llm.c's layernorm_forward/backward.
#include "worker/layers/layernorm.h"

#include <cmath>
#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

LayerNormLayer::LayerNormLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.in_shape.empty() || d.in_shape.back() < 1)
    throw std::invalid_argument("layer '" + d.name + "': layernorm needs an input with a last dimension, got " +
                                tensor_shape_string(d.in_shape));
  check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
  desc_.out_shape = d.in_shape;
  C_ = d.in_shape.back();
  weight_.name = d.name + ".weight";
  weight_.value = Tensor::empty({C_}, Precision::FP32, memory, weight_.name);
  weight_.grad = Tensor::zeros({C_}, Precision::FP32, memory, weight_.name + ".grad");
  weight_.decay = false;
  bias_.name = d.name + ".bias";
  bias_.value = Tensor::empty({C_}, Precision::FP32, memory, bias_.name);
  bias_.grad = Tensor::zeros({C_}, Precision::FP32, memory, bias_.name + ".grad");
  bias_.decay = false;
  std::mt19937_64 unused;
  init_parameters(unused);
}

void LayerNormLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

void LayerNormLayer::init_parameters(std::mt19937_64& rng) {
  (void)rng;  // deterministic: weight 1, bias 0
  float* w = weight_.value.f32();
  float* b = bias_.value.f32();
  for (int64_t c = 0; c < C_; ++c) {
    w[c] = 1.0f;
    b[c] = 0.0f;
  }
}

int64_t LayerNormLayer::saved_bytes() const {
  return (xhat_.defined() ? xhat_.bytes() : 0) + (rstd_.defined() ? rstd_.bytes() : 0);
}

void layernorm_rows(const float* x, const float* weight, const float* bias, int64_t rows, int64_t C, float* y,
                    float* xhat, float* rstd) {
#pragma omp parallel for if (rows * C > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float mean = 0.0f;
    for (int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= float(C);
    float var = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float d = xr[c] - mean;
      var += d * d;
    }
    var /= float(C);
    const float s = 1.0f / std::sqrt(var + LayerNormLayer::EPS);
    for (int64_t c = 0; c < C; ++c) {
      const float n = (xr[c] - mean) * s;
      yr[c] = n * weight[c] + bias[c];
      if (xhat) xhat[r * C + c] = n;
    }
    if (rstd) rstd[r] = s;
  }
}

Tensor LayerNormLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  const int64_t C = C_;
  const int64_t R = x.numel() / C;  // rows
  Tensor y = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".out");  // (B, ..., C)
  xhat_ = Tensor();
  rstd_ = Tensor();
  float* xhat = nullptr;
  float* rstd = nullptr;
  if (ctx.training) {
    xhat_ = Tensor::empty(x.shape(), Precision::FP32, ctx.memory, name() + ".xhat");
    rstd_ = Tensor::empty({R}, Precision::FP32, ctx.memory, name() + ".rstd");
    xhat = xhat_.f32();
    rstd = rstd_.f32();
  }
  const float* xp = x.f32();
  const float* w = weight_.value.f32();
  const float* bias = bias_.value.f32();
  float* yp = y.f32();
  layernorm_rows(xp, w, bias, R, C, yp, xhat, rstd);
  return y;
}

Tensor LayerNormLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  if (!xhat_.defined() || xhat_.shape() != dy.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const int64_t C = C_;
  const int64_t R = dy.numel() / C;
  Tensor dx = Tensor::empty(dy.shape(), Precision::FP32, ctx.memory, name() + ".dx");  // (B, ..., C)
  const float* dyp = dy.f32();
  const float* xhat = xhat_.f32();
  const float* rstd = rstd_.f32();
  const float* w = weight_.value.f32();
  float* dxp = dx.f32();

  // dx, row by row: dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = w * dy
#pragma omp parallel for if (dy.numel() > (1 << 14))
  for (int64_t r = 0; r < R; ++r) {
    const float* dyr = dyp + r * C;
    const float* nr = xhat + r * C;
    float* dxr = dxp + r * C;
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float dnorm = w[c] * dyr[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * nr[c];
    }
    dnorm_mean /= float(C);
    dnorm_norm_mean /= float(C);
    for (int64_t c = 0; c < C; ++c)
      dxr[c] = rstd[r] * (w[c] * dyr[c] - dnorm_mean - nr[c] * dnorm_norm_mean);
  }

  // dweight += sum_rows dy * xhat, dbias += sum_rows dy: each thread owns a block of channels and
  // walks the rows in order, so the sums do not depend on the thread count.
  float* dw = weight_.grad.f32();
  float* db = bias_.grad.f32();
  constexpr int64_t BLOCK = 64;
  const int64_t blocks = (C + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (dy.numel() > (1 << 14))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * BLOCK, c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += dyp[r * C + c] * xhat[r * C + c];
        db[c] += dyp[r * C + c];
      }
  }
  xhat_ = Tensor();
  rstd_ = Tensor();
  return dx;
}

}  // namespace qsync
