// File: worker/layers/batchnorm.cpp
// Batch normalization forward (batch or running statistics) next to its backward (see batchnorm.h).
#include "worker/layers/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "worker/layers/graph_host.h"
#include "worker/layers/parameter_init.h"
#include "worker/layers/shape_check.h"

namespace qsync {
namespace {

// running * momentum + batch * (1 - momentum), the one formula of the local and the global update.
float running_update(float running, double batch, float momentum) {
  return float(running * momentum + batch * (1 - momentum));
}

}  // namespace

BatchNormLayer::BatchNormLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.in_shape.empty()) throw std::invalid_argument("layer '" + d.name + "': batchnorm needs (C, ...) inputs");
  desc_.out_shape = d.in_shape;
  C_ = d.in_shape[0];
  S_ = shape_numel(d.in_shape) / C_;
  weight_ = parameter_allocate(d.name + ".weight", {C_}, false, memory);
  bias_ = parameter_allocate(d.name + ".bias", {C_}, false, memory);
  std::fill(weight_.value.f32(), weight_.value.f32() + C_, 1.0f);
  running_mean_.assign(size_t(C_), 0.0f);
  running_var_.assign(size_t(C_), 1.0f);
  if (d.constants.size() == 2) {
    if (int64_t(d.constants[0].values->size()) != C_ || int64_t(d.constants[1].values->size()) != C_)
      throw std::invalid_argument("layer '" + d.name + "': running statistics must hold " + std::to_string(C_) + " values");
    running_mean_ = *d.constants[0].values;
    running_var_ = *d.constants[1].values;
  }
}

void BatchNormLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  out.push_back(&bias_);
}

Tensor BatchNormLayer::forward(const Tensor& x_in, StepContext& ctx) {
  const int64_t B = check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  const Tensor w = host_of(weight_.value), b = host_of(bias_.value);
  Tensor y = host_empty(x.shape(), ctx, name() + ".out");  // (B, C, S)
  const float* xp = x.f32();
  float* yp = y.f32();
  const float eps = float(desc_.eps), m = float(desc_.momentum);
  const int64_t n = B * S_;
  Tensor xhat, rstd;
  if (ctx.training) {
    xhat = host_empty(x.shape(), ctx, name() + ".xhat");
    rstd = Tensor::empty({C_}, Precision::FP32, nullptr, name() + ".rstd");
  }
  if (ctx.training) {
    mean_before_ = running_mean_;
    var_before_ = running_var_;
    pending_ = true;
    pending_n_ = n;
    pending_sum_.assign(size_t(C_), 0.0);
    pending_m2_.assign(size_t(C_), 0.0);
  }
  float* xh = ctx.training ? xhat.f32() : nullptr;
  float* rs = ctx.training ? rstd.f32() : nullptr;
  const float* wp = w.f32();
  const float* bp = b.f32();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C_; ++c) {  // channels are independent (their running statistics too)
    double mean, var;
    if (ctx.training) {
      double s = 0, s2 = 0;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t k = 0; k < S_; ++k) s += xp[(i * C_ + c) * S_ + k];
      mean = s / double(n);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t k = 0; k < S_; ++k) {
          const double d = xp[(i * C_ + c) * S_ + k] - mean;
          s2 += d * d;
        }
      var = s2 / double(n);
      const double unbiased = n > 1 ? s2 / double(n - 1) : var;
      running_mean_[size_t(c)] = running_update(running_mean_[size_t(c)], mean, m);
      running_var_[size_t(c)] = running_update(running_var_[size_t(c)], unbiased, m);
      pending_sum_[size_t(c)] = s;
      pending_m2_[size_t(c)] = s2;
    } else {
      mean = running_mean_[size_t(c)];
      var = running_var_[size_t(c)];
    }
    const float r = float(1.0 / std::sqrt(var + eps));
    if (rs) rs[c] = r;
    const float g = wp[c], beta = bp[c], mu = float(mean);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < S_; ++k) {
        const int64_t at = (i * C_ + c) * S_ + k;
        const float h = (xp[at] - mu) * r;
        if (xh) xh[at] = h;
        yp[at] = h * g + beta;
      }
  }
  xhat_ = xhat;
  rstd_ = rstd;
  return to_rank(y, ctx, name() + ".out");
}

std::vector<RunningStatistics::Buffer> BatchNormLayer::buffers() {
  return {{name() + ".running_mean", &running_mean_}, {name() + ".running_var", &running_var_}};
}

// [n, sum (C), squared deviations from the local mean (C), n * mean^2 (C)]: over ranks these add
// up to the global batch's count, sum and (with the global mean) squared deviations.
void BatchNormLayer::batch_sums(double* out) const {
  std::fill(out, out + batch_sums_size(), 0.0);
  if (!pending_ || pending_n_ == 0) return;
  const double n = double(pending_n_);
  out[0] = n;
  for (int64_t c = 0; c < C_; ++c) {
    const double mean = pending_sum_[size_t(c)] / n;
    out[1 + c] = pending_sum_[size_t(c)];
    out[1 + C_ + c] = pending_m2_[size_t(c)];
    out[1 + 2 * C_ + c] = n * mean * mean;
  }
}

void BatchNormLayer::update_from_sums(const double* sums) {
  const double n = sums[0];
  if (n > 0) {
    const float m = float(desc_.momentum);
    const std::vector<float>& mean0 = pending_ ? mean_before_ : running_mean_;
    const std::vector<float>& var0 = pending_ ? var_before_ : running_var_;
    for (int64_t c = 0; c < C_; ++c) {
      const double mean = sums[1 + c] / n;
      // sum of (m2_r + n_r mean_r^2) - n mean^2: the global squared deviations (never below 0)
      const double m2 = std::max(0.0, sums[1 + C_ + c] + sums[1 + 2 * C_ + c] - n * mean * mean);
      const double unbiased = n > 1 ? m2 / (n - 1) : m2 / n;
      running_mean_[size_t(c)] = running_update(mean0[size_t(c)], mean, m);
      running_var_[size_t(c)] = running_update(var0[size_t(c)], unbiased, m);
    }
  }
  pending_ = false;
}

// dx = rstd / n * (n * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat)), dxhat = dy * weight.
Tensor BatchNormLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  const int64_t B = check_batched(dy_in, desc_.out_shape, name(), "dy");
  if (!xhat_.defined() || xhat_.dim(0) != B)
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const Tensor dy = host_of(dy_in);
  const Tensor w = host_of(weight_.value);
  Tensor dx = host_empty(dy.shape(), ctx, name() + ".dx");
  Tensor dw = Tensor::zeros({C_}, Precision::FP32, nullptr), db = Tensor::zeros({C_}, Precision::FP32, nullptr);
  const float* g = dy.f32();
  const float* h = xhat_.f32();
  const double n = double(B * S_);
  float* dxp = dx.f32();
  float* dwp = dw.f32();
  float* dbp = db.f32();
  const float* wp = w.f32();
  const float* rs = rstd_.f32();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C_; ++c) {
    double sum_dy = 0, sum_dy_h = 0;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < S_; ++k) {
        const int64_t at = (i * C_ + c) * S_ + k;
        sum_dy += g[at];
        sum_dy_h += double(g[at]) * h[at];
      }
    dwp[c] = float(sum_dy_h);
    dbp[c] = float(sum_dy);
    const double scale = double(wp[c]) * rs[c] / n;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < S_; ++k) {
        const int64_t at = (i * C_ + c) * S_ + k;
        dxp[at] = float(scale * (n * g[at] - sum_dy - h[at] * sum_dy_h));
      }
  }
  accumulate_grad(weight_, dw, ctx);
  accumulate_grad(bias_, db, ctx);
  xhat_ = Tensor();
  rstd_ = Tensor();
  return to_rank(dx, ctx, name() + ".dx");
}

}  // namespace qsync
