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
         (w_saved_.defined() && layer_precision_traits(precision_).weight_copy ? w_saved_.bytes() : 0);
}

// ---------------------------------------------------------------------------------------------
// forward: y (M, N) = x (M, K) W^T (N, K) + b

Tensor LinearLayer::forward(const Tensor& x_in, StepContext& ctx) {
  DeviceOps& ops = ops_of(ctx);
  x_shape_ = x_in.shape();
  const int64_t m = x_in.numel() / in_;
  const Tensor x = x_in.reshape({m, in_});                        // (M, K) fp32
  if (ctx.observer) ctx.observer->gemm_forward(*this, x_in, weight_.value);
  const Tensor xc = cast_activation(x, precision_, ctx, name(), OperandRole::A);  // (M, K) forward precision
  const Tensor wc = cast_parameter(weight_, precision_, ctx, name(), OperandRole::B);
  Shape y_shape = x_shape_;
  y_shape.back() = out_;
  Tensor y = ops.empty(y_shape, Precision::FP32, ctx.memory, name() + " output");  // (M, N)
  {
    OpClock clock(ctx, name() + ".gemm_forward");
    MatmulOptions o;
    if (bias_.value.defined()) o.bias = &bias_.value;  // the bias epilogue: y += b after the product
    ops.matmul(xc, Transpose::NO, wc, Transpose::YES, y, o);
  }
  if (ctx.training) {
    x_saved_ = xc;
    w_saved_ = wc;
  }
  return y;
}

// backward: dx (M, K) = dy (M, N) W (N, K);  dW (N, K) += dy^T x;  db (N) += sum_rows dy
// On devices whose INT8/FP8 GEMMs want k-contiguous operands (cuBLASLt's TN), the quantized
// gradient is also written transposed, so dW = (dy^T) x reads it as a k-contiguous A operand.

Tensor LinearLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  if (!x_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  DeviceOps& ops = ops_of(ctx);
  const int64_t m = dy_in.numel() / out_;
  const Tensor dy = dy_in.reshape({m, out_});
  // The bias gradient sums the FP32 dy in every precision; for fp32 and tf32 the weight-gradient
  // GEMM reads that same dy and adds the sums in its epilogue.
  const bool bias_in_gemm = bias_.value.defined() && !layer_precision_traits(precision_).weight_copy;
  if (bias_.value.defined() && !bias_in_gemm) ops.bias_grad_rows(dy, bias_.grad);
  Tensor g_t;  // (N, M): dy^T in the backward precision, where the device wants it
  const Tensor g = cast_gradient(dy, precision_, ctx, name(), &g_t);  // (M, N) backward precision
  Tensor dx;  // (M, K); undefined when no input gradient is needed (the model's first GEMM)
  if (input_gradient_needed_) {
    dx = ops.empty(x_shape_, Precision::FP32, ctx.memory, name() + " input gradient");
    const Tensor wb = backward_weight(w_saved_, weight_, precision_, ctx, name(), OperandRole::B);
    OpClock clock(ctx, name() + ".gemm_input_grad");
    Tensor dx2 = dx.reshape({m, in_});
    ops.matmul(g, Transpose::NO, wb, Transpose::NO, dx2, {});
  }
  {
    const Tensor xb = backward_operand(x_saved_, precision_, ctx, name());
    OpClock clock(ctx, name() + ".gemm_weight_grad");
    MatmulOptions o;
    o.beta = 1.0f;
    if (bias_in_gemm) o.row_sums_of_a = &bias_.grad;
    if (g_t.defined()) ops.matmul(g_t, Transpose::NO, xb, Transpose::NO, weight_.grad, o);
    else ops.matmul(g, Transpose::YES, xb, Transpose::NO, weight_.grad, o);
  }
  if (ctx.observer) ctx.observer->gemm_backward(*this, dy_in, weight_.grad);
  x_saved_ = Tensor();
  w_saved_ = Tensor();
  return dx;
}

}  // namespace qsync
