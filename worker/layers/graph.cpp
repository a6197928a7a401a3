// File: worker/layers/graph.cpp
// The ONNX graph as a layer: forward in topological order, backward in reverse (see graph.h).
#include "worker/layers/graph.h"

#include <map>
#include <stdexcept>

#include "worker/layers/shape_check.h"

namespace qsync {

GraphLayer::GraphLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  if (d.graph_inputs.size() != 1 || d.children.empty())
    throw std::invalid_argument("graph layer '" + d.name + "' needs children and one output node");
  output_ = d.graph_inputs[0];
  last_reader_.assign(d.children.size(), -1);
  for (size_t i = 0; i < d.children.size(); ++i) {
    const LayerDesc& c = d.children[i];
    if (c.graph_inputs.empty() || c.graph_inputs.size() != c.input_shapes.size())
      throw std::invalid_argument("graph node '" + c.name + "' has no inputs or no shapes for them");
    for (size_t j = 0; j < c.graph_inputs.size(); ++j) {
      const int from = c.graph_inputs[j];
      if (from < -1 || from >= int(i))
        throw std::invalid_argument("graph node '" + c.name + "' reads node " + std::to_string(from) +
                                    ", which does not come before it");
      const Shape& produced = from < 0 ? d.in_shape : d.children[size_t(from)].out_shape;
      if (produced != c.input_shapes[j])
        throw std::invalid_argument("graph node '" + c.name + "' expects input " + tensor_shape_string(c.input_shapes[j]) +
                                    " but its producer gives " + tensor_shape_string(produced));
      if (from >= 0) last_reader_[size_t(from)] = int(i);
    }
    children_.push_back(layer_create(c, memory));
    if (c.graph_inputs.size() > 1 && !dynamic_cast<MultiInputLayer*>(children_.back().get()))
      throw std::invalid_argument("graph node '" + c.name + "' has several inputs but its kind takes one");
  }
  if (output_ < 0 || output_ >= int(children_.size()))
    throw std::invalid_argument("graph layer '" + d.name + "': output node out of range");
  last_reader_[size_t(output_)] = int(children_.size());
  desc_.out_shape = d.children[size_t(output_)].out_shape;
  find_tied_parameters();
}

// Pairs each tied initial value's parameter with the parameter of the initializer's first use.
void GraphLayer::find_tied_parameters() {
  std::map<std::string, Parameter*> owner;  // initializer name -> the parameter of its first use
  for (auto& child : children_) {
    const std::vector<GraphTensor>& initial = child->desc().initial;
    std::vector<Parameter*> params;
    child->collect_parameters(params);
    for (size_t k = 0; k < initial.size() && k < params.size(); ++k) {
      const GraphTensor& g = initial[k];
      if (!g.tied) {
        if (!g.name.empty()) owner.emplace(g.name, params[k]);
        continue;
      }
      const auto it = owner.find(g.name);
      if (it == owner.end() || it->second->value.shape() != params[k]->value.shape())
        throw std::invalid_argument("graph node '" + child->name() + "': parameter '" + params[k]->name +
                                    "' is tied to initializer '" + g.name + "', which no earlier node trains in " +
                                    tensor_shape_string(params[k]->value.shape()));
      tied_.emplace_back(params[k], it->second);
    }
  }
}

bool GraphLayer::is_tied_use(const Parameter* p) const {
  for (const auto& [use, shared] : tied_)
    if (use == p) return true;
  return false;
}

void GraphLayer::share_parameters() {
  for (auto& [use, shared] : tied_) {
    use->value = shared->value;  // views of the model's flat buffers
    use->grad = shared->grad;
  }
}

Tensor GraphLayer::forward(const Tensor& x, StepContext& ctx) {
  check_batched(x, desc_.in_shape, name(), "input");
  std::vector<Tensor> values(children_.size());  // (B, out_shape...) of each node while read
  for (size_t i = 0; i < children_.size(); ++i) {
    Layer& child = *children_[i];
    const std::vector<int>& from = child.desc().graph_inputs;
    {
      OpClock clock(ctx, child.name() + ".forward");
      if (auto* multi = dynamic_cast<MultiInputLayer*>(&child)) {
        std::vector<Tensor> xs;
        for (int f : from) xs.push_back(f < 0 ? x : values[size_t(f)]);
        values[i] = multi->forward_inputs(xs, ctx);
      } else {
        values[i] = child.forward(from[0] < 0 ? x : values[size_t(from[0])], ctx);
      }
    }
    for (int f : from)  // values no later node reads
      if (f >= 0 && last_reader_[size_t(f)] == int(i)) values[size_t(f)] = Tensor();
  }
  return values[size_t(output_)];
}

Tensor GraphLayer::backward(const Tensor& dy, StepContext& ctx) {
  DeviceOps& ops = ops_of(ctx);
  std::vector<Tensor> grads(children_.size());  // d loss / d (each node's output)
  grads[size_t(output_)] = dy;
  Tensor dx;
  auto accumulate = [&](Tensor& into, const Tensor& g, const std::string& what) {
    if (!g.defined()) return;
    if (!into.defined()) {
      into = g;
      return;
    }
    Tensor sum = ops.empty(g.shape(), Precision::FP32, ctx.memory, what);
    ops.add(into, g, sum);
    into = sum;
  };
  for (size_t i = children_.size(); i-- > 0;) {
    Layer& child = *children_[i];
    if (!grads[i].defined()) {  // no gradient reaches this node: its parameters' gradients are final (zero)
      if (ctx.backward_listener != nullptr) ctx.backward_listener->layer_backward_done(child);
      continue;
    }
    std::vector<Tensor> dxs;
    {
      OpClock clock(ctx, child.name() + ".backward");
      if (auto* multi = dynamic_cast<MultiInputLayer*>(&child)) dxs = multi->backward_inputs(grads[i], ctx);
      else dxs = {child.backward(grads[i], ctx)};
    }
    if (ctx.backward_listener != nullptr) ctx.backward_listener->layer_backward_done(child);
    grads[i] = Tensor();
    const std::vector<int>& from = child.desc().graph_inputs;
    for (size_t j = 0; j < from.size() && j < dxs.size(); ++j) {
      if (from[j] < 0) accumulate(dx, dxs[j], name() + ".dx");
      else accumulate(grads[size_t(from[j])], dxs[j], child.name() + ".dx_sum");
    }
  }
  return dx;
}

void GraphLayer::collect_parameters(std::vector<Parameter*>& out) {
  std::vector<Parameter*> all;
  for (auto& child : children_) child->collect_parameters(all);
  for (Parameter* p : all)
    if (!is_tied_use(p)) out.push_back(p);
}

void GraphLayer::init_parameters(std::mt19937_64& rng) {
  for (auto& child : children_) {
    child->init_parameters(rng);
    const std::vector<GraphTensor>& initial = child->desc().initial;
    if (initial.empty()) continue;
    std::vector<Parameter*> params;
    child->collect_parameters(params);
    if (params.size() != initial.size())
      throw std::invalid_argument("graph node '" + child->name() + "' has " + std::to_string(params.size()) +
                                  " parameters but the model gives " + std::to_string(initial.size()) + " initial values");
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor& v = params[k]->value;
      const GraphTensor& g = initial[k];
      if (int64_t(g.values->size()) != v.numel())
        throw std::invalid_argument("graph node '" + child->name() + "': initializer '" + g.name + "' holds " +
                                    std::to_string(g.values->size()) + " values for parameter '" + params[k]->name +
                                    "' of " + std::to_string(v.numel()));
      Tensor host = Tensor::empty(v.shape(), Precision::FP32, nullptr, "initial");
      std::copy(g.values->begin(), g.values->end(), host.f32());
      tensor_copy_from_host(host, v);
    }
  }
}

void GraphLayer::apply_plan(const RankPlan& plan) {
  for (auto& child : children_) child->apply_plan(plan);
}

int64_t GraphLayer::saved_bytes() const {
  int64_t total = 0;
  for (const auto& child : children_) total += child->saved_bytes();
  return total;
}

}  // namespace qsync
