// File: worker/layers/container.cpp
// Sequential and residual containers.
#include "worker/layers/container.h"

#include <stdexcept>
#include <string_view>

#include "worker/layers/activation.h"
#include "worker/layers/conv2d.h"
#include "worker/layers/shape_check.h"

namespace qsync {

namespace {

bool is_container(const Layer& l) {
  return l.desc().kind == LayerKind::SEQUENTIAL || l.desc().kind == LayerKind::RESIDUAL;
}

// Runs f, recording its seconds as "<layer>.<phase>" when a timer is set and `layer` is a leaf;
// after a leaf's backward, tells the backward listener.
template <class F>
Tensor timed(Layer& layer, const char* phase, StepContext& ctx, F&& f) {
  if (is_container(layer)) return f();
  Tensor out;
  {
    OpClock clock(ctx, layer.name() + "." + phase);  // on the device's timeline
    out = f();
  }
  if (ctx.backward_listener != nullptr && std::string_view(phase) == "backward")
    ctx.backward_listener->layer_backward_done(layer);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sequential

SequentialLayer::SequentialLayer(const LayerDesc& d, MemoryAccount* memory, const LayerFactory& make) : Layer(d) {
  for (const LayerDesc& child : d.children) {
    children_.push_back(make(child, memory));
    if (!children_.back())
      throw std::invalid_argument("layer '" + d.name + "': no layer built for child '" + child.name + "'");
  }
  for (size_t i = 1; i < children_.size(); ++i) {
    const Layer& prev = *children_[i - 1];
    const Layer& next = *children_[i];
    if (prev.desc().out_shape != next.desc().in_shape)
      throw std::invalid_argument("layer '" + d.name + "': child '" + prev.name() + "' outputs " +
                                  tensor_shape_string(prev.desc().out_shape) + " but '" + next.name() +
                                  "' takes " + tensor_shape_string(next.desc().in_shape));
  }
  // A convolution followed by a ReLU applies it in its output pass: one pass over the activation
  // fewer, forward and backward unchanged to the bit.
  for (size_t i = 1; i < children_.size(); ++i) {
    auto* conv = dynamic_cast<Conv2dLayer*>(children_[i - 1].get());
    auto* relu = dynamic_cast<ReluLayer*>(children_[i].get());
    if (conv != nullptr && relu != nullptr) conv->fuse_relu(*relu);
  }
  // And a 2x2 / stride-2 max pooling after that ReLU in the same pass, where the device can: the
  // convolution's full output is then never written nor read back.
  for (size_t i = 2; i < children_.size(); ++i) {
    auto* conv = dynamic_cast<Conv2dLayer*>(children_[i - 2].get());
    auto* relu = dynamic_cast<ReluLayer*>(children_[i - 1].get());
    auto* pool = dynamic_cast<MaxPool2dLayer*>(children_[i].get());
    if (conv != nullptr && relu != nullptr && pool != nullptr && relu->applied_by_previous_layer() && pool->pools_2x2())
      conv->fuse_pool(*pool);
  }
  if (!children_.empty()) {
    const Shape& first_in = children_.front()->desc().in_shape;
    const Shape& last_out = children_.back()->desc().out_shape;
    check_resolved_shape(d.in_shape, first_in, d.name, "in_shape");
    check_resolved_shape(d.out_shape, last_out, d.name, "out_shape");
    desc_.in_shape = first_in;
    desc_.out_shape = last_out;
  } else {
    check_resolved_shape(d.out_shape, d.in_shape, d.name, "out_shape");
    desc_.out_shape = d.in_shape;
  }
}

Tensor SequentialLayer::forward(const Tensor& x, StepContext& ctx) {
  Tensor h = x;  // (B, in_shape...) -> each child's output in turn
  for (auto& child : children_) h = timed(*child, "forward", ctx, [&] { return child->forward(h, ctx); });
  return h;
}

Tensor SequentialLayer::backward(const Tensor& dy, StepContext& ctx) {
  Tensor g = dy;  // (B, out_shape...) -> each child's dx in turn
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    Layer& child = **it;
    // Children before the first one with parameters, when no input gradient is needed: nothing
    // of theirs needs a gradient (what they saved is replaced by the next forward).
    if (!g.defined() && !child.input_gradient_needed()) break;
    g = timed(child, "backward", ctx, [&] { return child.backward(g, ctx); });
  }
  return g;
}

void SequentialLayer::set_input_gradient_needed(bool needed) {
  Layer::set_input_gradient_needed(needed);
  for (auto& child : children_) {
    child->set_input_gradient_needed(needed);
    std::vector<Parameter*> params;
    child->collect_parameters(params);
    if (!params.empty()) needed = true;
  }
}

void SequentialLayer::collect_parameters(std::vector<Parameter*>& out) {
  for (auto& child : children_) child->collect_parameters(out);
}

void SequentialLayer::init_parameters(std::mt19937_64& rng) {
  for (auto& child : children_) child->init_parameters(rng);
}

void SequentialLayer::apply_plan(const RankPlan& plan) {
  for (auto& child : children_) child->apply_plan(plan);
}

int64_t SequentialLayer::saved_bytes() const {
  int64_t total = 0;
  for (const auto& child : children_) total += child->saved_bytes();
  return total;
}

// ---------------------------------------------------------------------------------------------
// Residual

ResidualLayer::ResidualLayer(const LayerDesc& d, MemoryAccount* memory, const LayerFactory& make)
    : Layer(d), body_(std::make_unique<SequentialLayer>(d, memory, make)) {
  const Shape& in = body_->desc().in_shape;
  const Shape& out = body_->desc().out_shape;
  if (in != out)
    throw std::invalid_argument("layer '" + d.name + "': a residual body must keep the shape, but it maps " +
                                tensor_shape_string(in) + " to " + tensor_shape_string(out));
  desc_.in_shape = in;
  desc_.out_shape = out;
}

namespace {

// out = a + b, elementwise, (B, N...).
Tensor add_tensors(const Tensor& a, const Tensor& b, StepContext& ctx, const std::string& what) {
  DeviceOps& ops = ops_of(ctx);
  Tensor out = ops.empty(a.shape(), Precision::FP32, ctx.memory, what);
  ops.add(a, b, out);
  return out;
}

}  // namespace

Tensor ResidualLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  Tensor h = body_->forward(x, ctx);  // (B, in_shape...)
  check_batched(h, desc_.in_shape, name(), "body output");
  return add_tensors(x, h, ctx, name() + ".out");
}

Tensor ResidualLayer::backward(const Tensor& dy, StepContext& ctx) {
  check_batched(dy, desc_.out_shape, name(), "dy");
  Tensor dh = body_->backward(dy, ctx);  // (B, in_shape...)
  return add_tensors(dy, dh, ctx, name() + ".dx");
}

}  // namespace qsync
