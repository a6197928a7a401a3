// File: planner/model_onnx_fusion.cpp
// Node patterns of PyTorch's exports that become one engine layer: a MatMul's bias Add (into the
// linear layer) and the exact-erf GELU before opset 20 (into the engine's gelu). Each match
// requires every intermediate value to be read once; anything else maps node by node.
#include <algorithm>
#include <cmath>

#include "planner/model_onnx_build.h"

namespace qsync::onnx_build {

// The Add right after a MatMul by a weight, when it adds a 1-D bias and is the output's only use.
const onnx::Node* bias_add(Builder& b, const onnx::Node& n, size_t index, int64_t N, const onnx::TensorData** bias) {
  const std::string& out = n.outputs.at(0);
  if (b.uses[out] != 1) return nullptr;
  for (size_t j = index + 1; j < b.graph->nodes.size(); ++j) {
    const onnx::Node& c = b.graph->nodes[j];
    const auto at = std::find(c.inputs.begin(), c.inputs.end(), out);
    if (at == c.inputs.end()) continue;
    if (c.op_type != "Add" || c.inputs.size() != 2) return nullptr;
    const std::string& other = c.inputs[at == c.inputs.begin() ? 1 : 0];
    const auto v = b.values.find(other);
    if (v == b.values.end() || !v->second.constant || v->second.data->dims.size() != 1 ||
        v->second.data->dims[0] != N || !v->second.data->is_floating())
      return nullptr;
    *bias = v->second.data.get();
    return &c;
  }
  return nullptr;
}

// The node after `index` reading `value`, when it is that value's only reader.
static const onnx::Node* only_reader(Builder& b, const std::string& value, size_t index, size_t* at) {
  if (b.uses[value] != 1) return nullptr;
  for (size_t j = index + 1; j < b.graph->nodes.size(); ++j) {
    const onnx::Node& c = b.graph->nodes[j];
    if (std::find(c.inputs.begin(), c.inputs.end(), value) != c.inputs.end()) {
      *at = j;
      return &c;
    }
  }
  return nullptr;
}

// A scalar constant operand of `n` (the other input than `value`) equal to `want` within 1e-4.
static bool scalar_operand(Builder& b, const onnx::Node& n, const std::string& value, double want) {
  if (n.inputs.size() != 2) return false;
  const std::string& other = n.inputs[0] == value ? n.inputs[1] : n.inputs[0];
  const auto v = b.values.find(other);
  return v != b.values.end() && v->second.constant && v->second.data->is_floating() && v->second.data->numel() == 1 &&
         std::fabs(v->second.data->floats[0] - want) < 1e-4 * std::max(1.0, std::fabs(want));
}

// PyTorch's exact GELU before opset 20: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5, each
// the previous one's only reader. Becomes one gelu layer (the engine's, on every device).
bool fuse_gelu(Builder& b, const onnx::Node& div, size_t index) {
  if (div.inputs.size() != 2 || b.is_constant(div, 0) || !scalar_operand(b, div, div.inputs[0], std::sqrt(2.0)) ||
      div.inputs[1] == div.inputs[0])
    return false;
  const std::string& x = div.inputs[0];
  size_t at = index;
  const onnx::Node* erf = only_reader(b, div.outputs.at(0), at, &at);
  if (!erf || erf->op_type != "Erf") return false;
  const onnx::Node* add = only_reader(b, erf->outputs.at(0), at, &at);
  if (!add || add->op_type != "Add" || !scalar_operand(b, *add, erf->outputs[0], 1.0)) return false;
  const onnx::Node* mul = only_reader(b, add->outputs.at(0), at, &at);
  if (!mul || mul->op_type != "Mul" || mul->inputs.size() != 2 ||
      (mul->inputs[0] == x ? mul->inputs[1] : mul->inputs[0]) != add->outputs[0] ||
      (mul->inputs[0] != x && mul->inputs[1] != x))
    return false;
  const onnx::Node* half = only_reader(b, mul->outputs.at(0), at, &at);
  if (!half || half->op_type != "Mul" || !scalar_operand(b, *half, mul->outputs[0], 0.5)) return false;
  onnx::Node gelu = div;  // named after the Div's scope ("/blocks.0/act/Div" -> "blocks.0.act.Gelu")
  std::string scope = div.name.substr(0, div.name.rfind('/') == std::string::npos ? 0 : div.name.rfind('/'));
  gelu.name = scope + "/Gelu";
  gelu.op_type = "Gelu";
  gelu.inputs = {x};
  gelu.outputs = {half->outputs.at(0)};
  for (const onnx::Node* n : {erf, add, mul, half}) b.consumed.insert(n->outputs.at(0));
  map_simple(b, gelu, LayerKind::GELU);
  return true;
}

}  // namespace qsync::onnx_build
