// File: worker/layers/conv2d.cpp
// Conv2d forward and backward: the precision casts of worker/precision_ops.h around the
// convolution ops of the rank's device.
#include "worker/layers/conv2d.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "worker/layers/parameter_init.h"
#include "worker/precision_ops.h"

namespace qsync {

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
         (w_saved_.defined() && layer_precision_traits(precision_).weight_copy ? w_saved_.bytes() : 0);
}

void Conv2dLayer::fuse_relu(ReluLayer& relu) {
  if (relu.desc().in_shape != desc_.out_shape)
    throw std::logic_error("layer '" + name() + "': cannot apply ReLU '" + relu.name() + "', whose input is not this output");
  fused_relu_ = &relu;
  relu.set_applied_by_previous_layer();
}

void Conv2dLayer::fuse_pool(MaxPool2dLayer& pool) {
  if (fused_relu_ == nullptr || pool.desc().in_shape != desc_.out_shape || !pool.pools_2x2())
    throw std::logic_error("layer '" + name() + "': cannot run pooling '" + pool.name() +
                           "' in its output pass: it must be a 2x2 / stride-2 max pooling of this layer's fused ReLU");
  fused_pool_ = &pool;
}

// ---------------------------------------------------------------------------------------------
// forward: y (B, O, H', W') = relu(conv(cast x, cast W) + b), the ReLU when one is fused; with
// the pooling run here too, y (B, O, H'/2, W'/2) its output

Tensor Conv2dLayer::forward(const Tensor& x, StepContext& ctx) {
  DeviceOps& ops = ops_of(ctx);
  const int64_t batch = x.dim(0);
  if (ctx.observer) ctx.observer->gemm_forward(*this, x, weight_.value);  // the image: see LayerObserver
  const Tensor xc = cast_activation(x, precision_, ctx, name(), OperandRole::B);  // (B, C, H, W)
  const Tensor wc = cast_parameter(weight_, precision_, ctx, name(), OperandRole::A);  // (O, CKK)
  const bool pools = fused_pool_ != nullptr && ops.conv2d_forward_pools(xc, wc, g_);
  const Shape out_shape{batch, o_, g_.oh, g_.ow};
  Tensor y = pools ? ops.empty({batch, o_, g_.oh / 2, g_.ow / 2}, Precision::FP32, ctx.memory,
                               fused_pool_->name() + ".out")
                   : ops.empty(out_shape, Precision::FP32, ctx.memory, name() + " output");
  ConvEpilogue epilogue;
  Tensor relu_mask;  // (B, O, H', W') uint8 0/1, the fused ReLU's
  Tensor argmax;     // (B, O, H'/2, W'/2) int32, the fused pooling's
  if (fused_relu_ != nullptr) {
    epilogue.relu = true;
    if (ctx.training) {
      relu_mask = ops.empty(out_shape, Precision::INT8, ctx.memory, fused_relu_->name() + ".mask");
      epilogue.relu_mask = &relu_mask;
    }
  }
  if (pools) {
    epilogue.pool = true;
    if (ctx.training) {
      argmax = ops.empty(y.shape(), Precision::FP32, ctx.memory, fused_pool_->name() + ".argmax");
      epilogue.pool_argmax = &argmax;
    }
  }
  ops.conv2d_forward(xc, wc, bias_.value.defined() ? &bias_.value : nullptr, g_, epilogue, y, ctx, name());
  if (fused_relu_ != nullptr)  // the ReLU's backward deferred to ours where ours reads the mask on the fly
    fused_relu_->take_mask(std::move(relu_mask),
                           ops.conv_backward_reads_relu_mask() && cast_gradient_reads_relu_mask(precision_, ctx),
                           pools);
  if (fused_pool_ != nullptr) fused_pool_->take_pooled(pools, std::move(argmax));
  if (ctx.training) {
    x_saved_ = xc;
    w_saved_ = wc;
  }
  return y;
}

// backward: dx (B, C, H, W) = conv^T(dy, W); dW (O, CKK) += dy x; db (O) += sum dy, with dy cast
// by the layer precision (per chunk of samples where the device works in chunks)

Tensor Conv2dLayer::backward(const Tensor& dy, StepContext& ctx) {
  if (!x_saved_.defined()) throw std::logic_error("layer '" + name() + "': backward without a training forward");
  DeviceOps& ops = ops_of(ctx);
  const int64_t batch = dy.dim(0);
  Tensor dx;  // undefined when no input gradient is needed (the model's first convolution)
  if (input_gradient_needed_) dx = ops.empty({batch, g_.c, g_.h, g_.w}, Precision::FP32, ctx.memory, name() + " input gradient");
  const Tensor xb = backward_operand(x_saved_, precision_, ctx, name());  // (B, C, H, W)
  const Tensor wb = backward_weight(w_saved_, weight_, precision_, ctx, name(), OperandRole::A);
  Conv2dBackward a;
  a.dy = &dy;
  a.x = &xb;
  a.w = &wb;
  a.cast_dy = [&](const Tensor& g, const Tensor* relu_mask, float known_amax) {
    return cast_gradient(g, precision_, ctx, name(), nullptr, relu_mask, known_amax);
  };
  a.dy_conversion = gradient_conversion(precision_, ctx);
  // The fused ReLU deferred its backward to here (dy is its output gradient): the mask is read
  // on the fly by the casts and the bias gradient where they can.
  const bool relu_deferred = fused_relu_ != nullptr && fused_relu_->backward_deferred(ctx);
  if (relu_deferred) a.relu_mask = &fused_relu_->mask();
  a.dx = dx.defined() ? &dx : nullptr;
  a.dw = &weight_.grad;
  a.db = bias_.value.defined() ? &bias_.grad : nullptr;
  ops.conv2d_backward(a, g_, ctx, name());
  if (relu_deferred) fused_relu_->take_mask(Tensor());
  if (ctx.observer) ctx.observer->gemm_backward(*this, dy, weight_.grad);
  x_saved_ = Tensor();
  w_saved_ = Tensor();
  return dx;
}

}  // namespace qsync
