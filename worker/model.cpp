// File: worker/model.cpp
// Model assembly from the description.
#include "worker/model.h"

#include <cstring>

#include "worker/layers/attention.h"
#include "worker/layers/container.h"

namespace qsync {

Model::Model(const ModelDesc& desc, MemoryAccount* memory, uint64_t seed)
    : desc_(desc), root_(layer_create(desc_.root, memory)) {
  root_->collect_parameters(parameters_);
  std::mt19937_64 rng(seed);
  root_->init_parameters(rng);
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
  } else if (auto* a = dynamic_cast<AttentionLayer*>(&l)) {
    visit(a->qkv(), f);
    visit(a->proj(), f);
  }
}

}  // namespace

void Model::visit_layers(const std::function<void(Layer&)>& f) { visit(*root_, f); }

void Model::zero_grad() {
  for (Parameter* p : parameters_) std::memset(p->grad.data(), 0, size_t(p->grad.bytes()));
}

uint64_t Model::weight_hash() const {
  uint64_t h = 1469598103934665603ull;
  for (const Parameter* p : parameters_) {
    const auto* bytes = static_cast<const uint8_t*>(p->value.data());
    for (int64_t i = 0; i < p->value.bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace qsync
