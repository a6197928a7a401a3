// File: worker/layers/graph.h
// The layer of an ONNX model (planner/model_onnx.h): its children are the graph's nodes in
// topological order, each reading the outputs of earlier children (LayerDesc::graph_inputs; -1
// the model input). Forward runs them in order and drops each value after its last reader;
// backward runs them in reverse, summing the gradients of values read more than once (residual
// connections) and skipping nodes no gradient reaches. Initial weights come from the graph's
// initializers (LayerDesc::initial), copied over each child's own initialization. An initializer
// two nodes train (GraphTensor::tied: tied embeddings) is one parameter: the first node's; the
// later node's parameter is left out of collect_parameters and, once the model placed the
// parameters, shares the first's value and gradient (share_parameters), so both backwards add into
// one gradient. The first node's backward comes last (reverse order), so the gradient is complete
// when that node reports it ready.
//   MultiInputLayer: a node of several activation inputs (Add of two branches, Concat, MatMul).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "worker/layer.h"

namespace qsync {

class MultiInputLayer : public Layer {
 public:
  using Layer::Layer;
  // xs: one tensor per graph input of the node, (B, input_shapes[i]...).
  virtual Tensor forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) = 0;
  // One gradient per input (undefined: none flows there, e.g. token ids).
  virtual std::vector<Tensor> backward_inputs(const Tensor& dy, StepContext& ctx) = 0;
  Tensor forward(const Tensor& x, StepContext& ctx) override { return forward_inputs({x}, ctx); }
  Tensor backward(const Tensor& dy, StepContext& ctx) override { return backward_inputs(dy, ctx).at(0); }
};

class GraphLayer : public Layer {
 public:
  GraphLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void share_parameters() override;
  void init_parameters(std::mt19937_64& rng) override;
  void apply_plan(const RankPlan& plan) override;
  int64_t saved_bytes() const override;
  const std::vector<std::unique_ptr<Layer>>& children() const { return children_; }

 private:
  std::vector<std::unique_ptr<Layer>> children_;
  std::vector<int> last_reader_;  // per child: the last child reading its output (the output node: size)
  int output_ = 0;
  std::vector<std::pair<Parameter*, Parameter*>> tied_;  // (a later node's parameter, the one it shares)
  void find_tied_parameters();
  bool is_tied_use(const Parameter* p) const;
};

}  // namespace qsync
