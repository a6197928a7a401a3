// File: worker/model.cpp
// Model assembly from the description.
#include "worker/model.h"

#include <cstring>

#include "worker/layers/attention.h"
#include "worker/layers/container.h"
#include "worker/layers/graph.h"

namespace qsync {

Model::Model(const ModelDesc& desc, MemoryAccount* memory, uint64_t seed, DeviceOps* ops)
    : desc_(desc), ops_(ops != nullptr ? ops : &cpu_ops()), root_(layer_create(desc_.root, nullptr)) {
  // The layers' own parameter tensors are host, unaccounted: only the flat buffers are charged.
  root_->collect_parameters(parameters_);
  root_->set_input_gradient_needed(false);  // the input is data: backward stops at the first parameters
  std::mt19937_64 rng(seed);
  root_->init_parameters(rng);
  place_parameters(memory);
  root_->share_parameters();  // tied weights: one parameter, the gradients of its uses summed
  visit_layers([this](Layer& l) {
    if (RunningStatistics* r = l.running_statistics()) running_statistics_.push_back(r);
  });
}

void Model::place_parameters(MemoryAccount* memory) {
  offsets_.assign(parameters_.size(), 0);
  int64_t total = 0;
  for (size_t i = parameters_.size(); i-- > 0;) {  // reverse order: the gradient buckets' order
    offsets_[i] = total;
    total += (parameters_[i]->value.numel() + PARAMETER_ALIGNMENT - 1) / PARAMETER_ALIGNMENT * PARAMETER_ALIGNMENT;
  }
  values_ = ops_->zeros({total}, Precision::FP32, memory, "parameters");
  grads_ = ops_->zeros({total}, Precision::FP32, memory, "gradients");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = *parameters_[i];
    Tensor value = values_.view(offsets_[i], p.value.shape());
    tensor_copy_from_host(p.value, value);
    p.value = value;
    p.grad = grads_.view(offsets_[i], p.grad.shape());
  }
}

int64_t Model::offset_of(const Parameter* p) const {
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i] == p) return offsets_[i];
  throw std::invalid_argument("parameter '" + p->name + "' is not one of model '" + desc_.name + "'");
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const Parameter* p : parameters_) n += p->value.numel();
  return n;
}

void Model::apply_plan(const RankPlan& plan) { root_->apply_plan(plan); }

Tensor Model::forward(const Tensor& x, StepContext& ctx) {
  Shape expected = desc_.input_shape;
  expected.insert(expected.begin(), x.rank() > 0 ? x.dim(0) : 0);
  if (x.shape() != expected)
    throw std::invalid_argument("model '" + desc_.name + "' expects input " + shape_string(expected) + ", got " +
                                shape_string(x.shape()));
  return root_->forward(x, ctx);
}

void Model::backward(const Tensor& dlogits, StepContext& ctx) { (void)root_->backward(dlogits, ctx); }

namespace {

void visit(Layer& l, const std::function<void(Layer&)>& f) {
  f(l);
  if (auto* s = dynamic_cast<SequentialLayer*>(&l)) {
    for (const auto& child : s->children()) visit(*child, f);
  } else if (auto* r = dynamic_cast<ResidualLayer*>(&l)) {
    visit(r->body(), f);
  } else if (auto* g = dynamic_cast<GraphLayer*>(&l)) {
    for (const auto& child : g->children()) visit(*child, f);
  } else if (auto* a = dynamic_cast<AttentionLayer*>(&l)) {
    visit(a->qkv(), f);
    visit(a->proj(), f);
  }
}

}  // namespace

void Model::visit_layers(const std::function<void(Layer&)>& f) { visit(*root_, f); }

void Model::zero_grad() { ops_->fill_zero(grads_); }

uint64_t Model::weight_hash() const {
  const Tensor host = tensor_to_host(values_);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto* bytes = static_cast<const uint8_t*>(host.data()) + offsets_[i] * int64_t(sizeof(float));
    for (int64_t b = 0; b < parameters_[i]->value.bytes(); ++b) h = (h ^ bytes[b]) * 1099511628211ull;
  }
  return h;
}

}  // namespace qsync
