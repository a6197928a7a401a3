// File: worker/layers/container.h
// Containers of layers.
//   SequentialLayer  children in order: forward runs them first to last, backward last to first.
//                    An intermediate activation lives only as long as the next child keeps it.
//   ResidualLayer    y = x + body(x), body = the children in sequence (out shape == in shape);
//                    dx = dy + body.backward(dy).
// Children are built with layer_create (worker/layer_registry.cpp) unless a factory is given
// (tests build containers of chosen layer types without the registry).
// collect_parameters, init_parameters (children in order, one shared rng), apply_plan and
// saved_bytes recurse. With ctx.timer set, a Sequential records "<child>.forward" /
// "<child>.backward" seconds for each child that is not itself a container.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "worker/layer.h"

namespace qsync {

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerDesc&, MemoryAccount*)>;

class SequentialLayer : public Layer {
 public:
  SequentialLayer(const LayerDesc& d, MemoryAccount* memory) : SequentialLayer(d, memory, &layer_create) {}
  SequentialLayer(const LayerDesc& d, MemoryAccount* memory, const LayerFactory& make);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void init_parameters(std::mt19937_64& rng) override;
  void apply_plan(const RankPlan& plan) override;
  int64_t saved_bytes() const override;
  // A child needs its input gradient when this container does or a child before it has parameters.
  void set_input_gradient_needed(bool needed) override;

  const std::vector<std::unique_ptr<Layer>>& children() const { return children_; }

 private:
  std::vector<std::unique_ptr<Layer>> children_;
};

class ResidualLayer : public Layer {
 public:
  ResidualLayer(const LayerDesc& d, MemoryAccount* memory) : ResidualLayer(d, memory, &layer_create) {}
  ResidualLayer(const LayerDesc& d, MemoryAccount* memory, const LayerFactory& make);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override { body_->collect_parameters(out); }
  void init_parameters(std::mt19937_64& rng) override { body_->init_parameters(rng); }
  void apply_plan(const RankPlan& plan) override { body_->apply_plan(plan); }
  int64_t saved_bytes() const override { return body_->saved_bytes(); }

  const SequentialLayer& body() const { return *body_; }
  SequentialLayer& body() { return *body_; }

 private:
  std::unique_ptr<SequentialLayer> body_;
};

}  // namespace qsync
