// File: worker/layers/linear.cpp
// Linear forward and backward, in any layer precision (see worker/precision_ops.h).
#include "worker/layers/linear.h"

#include <cmath>

#include "worker/layers/parameter_init.h"
#include "worker/precision_ops.h"

namespace qsync {

LinearLayer::LinearLayer(const LayerDesc& d, MemoryAccount* memory)
    : Layer(d), in_(d.in_shape.back()), out_(d.out) {
  weight_ = parameter_allocate(d.name + ".weight", {out_, in_}, true, memory);
  if (d.bias)
    bias_ = parameter_allocate(d.name + ".bias", {out_}, false, memory);
}

void LinearLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&weight_);
  if (bias_.value.defined()) out.push_back(&bias_);
}

void LinearLayer::init_parameters(std::mt19937_64& rng) {
  init_uniform(weight_.value, float(1.0 / std::sqrt(double(in_))), rng);
  if (bias_.value.defined()) init_uniform(bias_.value, float(1.0 / std::sqrt(double(in_))), rng);
}

int64_t LinearLayer::saved_bytes() const {
  return (x_saved_.defined() ? x_saved_.bytes() : 0) +
         (w_saved_.defined() && precision_ != LayerPrecision::FP32 ? w_saved_.bytes() : 0);
}

// ---------------------------------------------------------------------------------------------
// forward: y (M, N) = x (M, K) W^T (N, K) + b

Tensor LinearLayer::forward(const Tensor& x_in, StepContext& ctx) {
  x_shape_ = x_in.shape();
  const int64_t m = x_in.numel() / in_;
  const Tensor x = x_in.reshape({m, in_});                        // (M, K) fp32
  if (ctx.observer) ctx.observer->gemm_forward(*this, x_in, weight_.value);
  const Tensor xc = cast_activation(x, precision_, ctx, name(), OperandRole::A);  // (M, K) forward precision
  const Tensor wc = cast_weight(weight_.value, precision_, ctx, name(), OperandRole::B);
  Shape y_shape = x_shape_;
  y_shape.back() = out_;
  Tensor y = Tensor::empty(y_shape, Precision::FP32, ctx.memory, name() + " output");  // (M, N)
  {
    OpClock clock(ctx, name() + ".gemm_forward");
    matmul(xc, Transpose::NO, wc, Transpose::YES, y.f32(), 0.0f);
  }
  if (bias_.value.defined()) {
    float* yp = y.f32();
    const float* b = bias_.value.f32();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < out_; ++j) yp[i * out_ + j] += b[j];
  }
  if (ctx.training) {
    x_saved_ = xc;
    w_saved_ = wc;
  }
  return y;
}

// backward: dx (M, K) = dy (M, N) W (N, K);  dW (N, K) += dy^T x;  db (N) += sum_rows dy

Tensor LinearLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  if (!x_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  const int64_t m = dy_in.numel() / out_;
  const Tensor dy = dy_in.reshape({m, out_});
  if (bias_.value.defined()) {
    float* db = bias_.grad.f32();
    const float* g = dy.f32();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < out_; ++j) db[j] += g[i * out_ + j];
  }
  const Tensor g = cast_gradient(dy, precision_, ctx, name());  // (M, N) backward precision
  Tensor dx = Tensor::empty(x_shape_, Precision::FP32, ctx.memory, name() + " input gradient");
  {
    const Tensor wb = backward_weight(w_saved_, weight_.value, precision_, ctx, name(), OperandRole::B);
    OpClock clock(ctx, name() + ".gemm_input_grad");
    matmul(g, Transpose::NO, wb, Transpose::NO, dx.f32(), 0.0f);
  }
  {
    const Tensor xb = backward_operand(x_saved_, precision_, ctx, name());
    OpClock clock(ctx, name() + ".gemm_weight_grad");
    matmul(g, Transpose::YES, xb, Transpose::NO, weight_.grad.f32(), 1.0f);
  }
  if (ctx.observer) ctx.observer->gemm_backward(*this, dy_in, weight_.grad);
  x_saved_ = Tensor();
  w_saved_ = Tensor();
  return dx;
}

}  // namespace qsync
