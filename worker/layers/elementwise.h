// File: worker/layers/elementwise.h
// The ONNX graph's elementwise layers (host loops, graph_host.h), numpy broadcasting (broadcast.h).
//   UnaryLayer   Sigmoid, Tanh (save y), Erf (saves x): x (B, S...) -> y same shape
//   BinaryLayer  Add, Sub, Mul, Div of two operands, each an activation, a constant or a trained
//                parameter (e.g. learned positions); y (B, out_shape...) broadcast. Saves the
//                operands Mul and Div need; gradients are summed over broadcast dims.
//   WhereLayer   y = cond ? X : Y, cond a constant (a causal mask), X / Y activations or constants.
#pragma once

#include "worker/layers/graph.h"

namespace qsync {

class UnaryLayer : public Layer {
 public:
  UnaryLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward(const Tensor& x, StepContext& ctx) override;
  Tensor backward(const Tensor& dy, StepContext& ctx) override;
  int64_t saved_bytes() const override { return saved_.defined() ? saved_.bytes() : 0; }

 private:
  enum class Op { SIGMOID, TANH, ERF } op_;
  Tensor saved_;  // (B, S...) FP32 host: y (sigmoid, tanh) or x (erf)
};

// An operand of an elementwise layer: where it comes from and its full (B, ...) shape.
struct ElementwiseOperand {
  int kind = 1;  // 1 activation, 0 constant, 2 parameter
  Tensor constant;  // host (dims), kind 0
  int activation = -1;  // index into the layer's activation inputs, kind 1
};

class BinaryLayer : public MultiInputLayer {
 public:
  BinaryLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy, StepContext& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  int64_t saved_bytes() const override;

 private:
  enum class Op { ADD, SUB, MUL, DIV } op_;
  ElementwiseOperand a_, b_;
  Parameter param_;  // the trained operand, when one is (its ONNX dims)
  Tensor saved_a_, saved_b_;  // host, full shapes (Mul, Div)
  Shape a_shape_, b_shape_;   // full shapes of this step's operands
  int64_t batch_ = 0;
};

class WhereLayer : public MultiInputLayer {
 public:
  WhereLayer(const LayerDesc& d, MemoryAccount* memory);
  Tensor forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) override;
  std::vector<Tensor> backward_inputs(const Tensor& dy, StepContext& ctx) override;

 private:
  Tensor cond_;  // host, its ONNX dims
  ElementwiseOperand x_, y_;
  Shape x_shape_, y_shape_;
  int64_t batch_ = 0;
};

}  // namespace qsync
