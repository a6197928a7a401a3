// File: planner/model_onnx.cpp
// ONNX bytes -> ModelDesc: the graph input and output, the task, names, the node walk and the
// constant folding of what PyTorch leaves unfolded (model_onnx_ops.cpp maps each op).
#include "planner/model_onnx.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "planner/model_onnx_build.h"

namespace qsync {

using onnx_build::Builder;
using onnx_build::Value;

namespace onnx_build {

void Builder::fail(const onnx::Node& n, const std::string& what) const {
  throw std::invalid_argument(source + ": node '" + n.name + "' (" + n.op_type + "): " + what);
}

const Value& Builder::value(const onnx::Node& n, size_t input) const {
  if (input >= n.inputs.size() || n.inputs[input].empty())
    fail(n, "input " + std::to_string(input) + " is missing");
  const auto it = values.find(n.inputs[input]);
  if (it == values.end())
    fail(n, "input '" + n.inputs[input] + "' is produced by no earlier node, initializer or graph input "
            "(the graph is not in topological order, or uses an op's output the engine does not keep)");
  if (it->second.unusable)
    fail(n, "input '" + n.inputs[input] + "' is an extra output (e.g. BatchNormalization's running statistics), "
            "which the engine keeps inside its layer; only the first output can feed other nodes");
  return it->second;
}

bool Builder::is_constant(const onnx::Node& n, size_t input) const { return value(n, input).constant; }

const Value& Builder::activation(const onnx::Node& n, size_t input) const {
  const Value& v = value(n, input);
  if (v.constant) fail(n, "input '" + n.inputs[input] + "' is a constant where the engine needs an activation");
  return v;
}

const onnx::TensorData& Builder::constant(const onnx::Node& n, size_t input) const {
  const Value& v = value(n, input);
  if (!v.constant)
    fail(n, "input '" + n.inputs[input] + "' must be a constant (an initializer or Constant), it is computed");
  return *v.data;
}

std::string Builder::layer_name(const onnx::Node& n, bool gemm_like) {
  std::string name = n.name;
  while (!name.empty() && name.front() == '/') name.erase(name.begin());
  for (char& c : name)
    if (c == '/') c = '.';
  if (name.empty()) name = n.op_type + "_" + std::to_string(layers.size());
  if (gemm_like) {
    const std::string suffix = "." + n.op_type;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        !names.count(name.substr(0, name.size() - suffix.size())))
      name.resize(name.size() - suffix.size());
  }
  std::string unique = name;
  for (int k = 2; names.count(unique); ++k) unique = name + "_" + std::to_string(k);
  names.insert(unique);
  return unique;
}

void Builder::add_layer(const onnx::Node& n, LayerDesc l) {
  Value v;  // n.outputs[0] exists: model_desc_from_onnx refuses nodes without one up front
  v.producer = int(layers.size());
  v.shape = l.out_shape;
  values[n.outputs[0]] = v;
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    Value extra;
    extra.unusable = true;
    if (!n.outputs[i].empty()) values[n.outputs[i]] = extra;
  }
  if (l.op.empty()) l.op = n.op_type;
  layers.push_back(std::move(l));
}

GraphTensor graph_tensor(const onnx::TensorData& t) {
  GraphTensor g;
  g.name = t.name;
  g.dims = t.dims;
  if (t.is_floating()) {
    g.values = std::make_shared<const std::vector<float>>(t.floats);
  } else {
    auto v = std::make_shared<std::vector<float>>(t.ints.size());
    for (size_t i = 0; i < t.ints.size(); ++i) (*v)[i] = float(t.ints[i]);
    g.values = v;
  }
  return g;
}

int64_t attr_int(const onnx::Node& n, const char* name, int64_t fallback) {
  const onnx::Attribute* a = n.attribute(name);
  return a ? a->i : fallback;
}
float attr_float(const onnx::Node& n, const char* name, float fallback) {
  const onnx::Attribute* a = n.attribute(name);
  return a ? a->f : fallback;
}
std::vector<int64_t> attr_ints(const onnx::Node& n, const char* name) {
  const onnx::Attribute* a = n.attribute(name);
  return a ? a->ints : std::vector<int64_t>{};
}

}  // namespace onnx_build

namespace {

// Constant, and Transpose / Cast / Identity / Unsqueeze of constants: evaluated at load.
bool fold_constant(Builder& b, const onnx::Node& n) {
  auto bind = [&](std::shared_ptr<onnx::TensorData> t) {
    Value v;
    v.constant = true;
    v.initializer = n.op_type != "Constant" && b.value(n, 0).initializer;
    if (n.op_type == "Constant") t->name = n.outputs.at(0);  // folds keep their initializer's name
    v.data = std::move(t);
    b.values[n.outputs[0]] = v;
    return true;
  };
  if (n.op_type == "Constant") {
    auto t = std::make_shared<onnx::TensorData>();
    if (const onnx::Attribute* a = n.attribute("value"); a && a->t) {
      *t = *a->t;
    } else if (const onnx::Attribute* f = n.attribute("value_float")) {
      t->data_type = 1, t->floats = {f->f};
    } else if (const onnx::Attribute* i = n.attribute("value_int")) {
      t->data_type = 7, t->ints = {i->i};
    } else if (const onnx::Attribute* is = n.attribute("value_ints")) {
      t->data_type = 7, t->ints = is->ints, t->dims = {int64_t(is->ints.size())};
    } else {
      b.fail(n, "a Constant needs a value, value_float, value_int or value_ints attribute");
    }
    return bind(t);
  }
  const bool foldable = n.op_type == "Transpose" || n.op_type == "Cast" || n.op_type == "Identity" ||
                        n.op_type == "Unsqueeze";
  if (!foldable || n.inputs.empty() || !b.is_constant(n, 0)) return false;
  if (n.op_type == "Unsqueeze" && n.inputs.size() > 1 && !b.is_constant(n, 1)) return false;
  const onnx::TensorData& in = b.constant(n, 0);
  auto t = std::make_shared<onnx::TensorData>(in);
  if (n.op_type == "Cast") {
    const int64_t to = onnx_build::attr_int(n, "to", 1);
    if (to == 1 || to == 11) {
      if (!in.is_floating()) t->floats.assign(in.ints.begin(), in.ints.end()), t->ints.clear();
      t->data_type = 1;
    } else {
      if (in.is_floating()) {
        t->ints.resize(in.floats.size());
        for (size_t i = 0; i < in.floats.size(); ++i) t->ints[i] = to == 9 ? (in.floats[i] != 0) : int64_t(in.floats[i]);
        t->floats.clear();
      } else if (to == 9) {
        for (auto& v : t->ints) v = v != 0;
      }
      t->data_type = int32_t(to);
    }
  } else if (n.op_type == "Transpose") {
    std::vector<int64_t> perm = onnx_build::attr_ints(n, "perm");
    const size_t r = in.dims.size();
    if (perm.empty())
      for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      if (sorted[i] != int64_t(i)) b.fail(n, "perm " + shape_string(perm) + " is not a permutation of 0.." + std::to_string(r - 1));
    if (perm.size() != r) b.fail(n, "perm has " + std::to_string(perm.size()) + " entries for a rank-" + std::to_string(r) + " tensor");
    std::vector<int64_t> in_strides(r, 1);
    for (size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * in.dims[i];
    for (size_t i = 0; i < r; ++i) t->dims[i] = in.dims[size_t(perm[i])];
    const int64_t numel = in.numel();
    std::vector<int64_t> idx(r, 0);
    for (int64_t o = 0; o < numel; ++o) {
      int64_t src = 0;
      for (size_t i = 0; i < r; ++i) src += idx[i] * in_strides[size_t(perm[i])];
      if (in.is_floating()) t->floats[size_t(o)] = in.floats[size_t(src)];
      else t->ints[size_t(o)] = in.ints[size_t(src)];
      for (size_t i = r; i-- > 0;) {
        if (++idx[i] < t->dims[i]) break;
        idx[i] = 0;
      }
    }
  } else if (n.op_type == "Unsqueeze") {
    std::vector<int64_t> axes = n.inputs.size() > 1 ? b.constant(n, 1).ints : onnx_build::attr_ints(n, "axes");
    const int64_t out_rank = int64_t(in.dims.size() + axes.size());
    for (int64_t& a : axes) a = a < 0 ? a + out_rank : a;
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes) t->dims.insert(t->dims.begin() + std::min<int64_t>(a, int64_t(t->dims.size())), 1);
  }
  return bind(t);
}

// The one graph input that is not an initializer: (batch, ...) float image or int64 token ids.
void bind_input(Builder& b, ModelDesc& m) {
  std::vector<const onnx::ValueInfo*> inputs;
  for (const onnx::ValueInfo& v : b.graph->inputs)
    if (!b.values.count(v.name)) inputs.push_back(&v);
  if (inputs.size() != 1)
    throw std::invalid_argument(b.source + ": the graph has " + std::to_string(inputs.size()) +
                                " inputs besides its initializers; the engine trains models of one input "
                                "(an image batch or a token-id batch): export with a single input tensor");
  const onnx::ValueInfo& in = *inputs[0];
  if (!in.has_shape || in.dims.size() < 2)
    throw std::invalid_argument(b.source + ": graph input '" + in.name + "' needs a shape (batch, ...) of rank 2 or more");
  for (size_t i = 1; i < in.dims.size(); ++i)
    if (in.dims[i] <= 0)
      throw std::invalid_argument(b.source + ": graph input '" + in.name + "' has a symbolic dimension " +
                                  std::to_string(i) + "; only the batch (dimension 0) may be dynamic: export "
                                  "with a fixed image size or sequence length");
  m.input_shape.assign(in.dims.begin() + 1, in.dims.end());
  if (in.elem_type == int32_t(onnx::DataType::INT64) || in.elem_type == int32_t(onnx::DataType::INT32)) {
    m.input_kind = InputKind::TOKENS;
    if (m.input_shape.size() != 1)
      throw std::invalid_argument(b.source + ": token input '" + in.name + "' must be (batch, seq_len)");
  } else if (in.elem_type == int32_t(onnx::DataType::FLOAT)) {
    m.input_kind = InputKind::IMAGE;
  } else {
    throw std::invalid_argument(b.source + ": graph input '" + in.name + "' is " + onnx::data_type_name(in.elem_type) +
                                "; the engine takes float images or int64 token ids");
  }
  Value v;
  v.producer = -1;
  v.shape = m.input_shape;
  b.values[in.name] = v;
}

// An initializer trained by several nodes (a GPT's token embedding Gather and its output MatMul
// on the transposed table, one weight used twice) is one parameter: its later uses are marked
// tied (the worker shares the first use's parameter) and leave their layer's parameter count.
// The uses must see it in one layout (the engine's linear weight (N, K) is the Gather table
// (vocab, dim) of the same initializer: Gemm transB=1 or MatMul of its Transpose); other layouts
// would be two copies trained apart, and are refused.
void tie_shared_initializers(Builder& b) {
  std::map<std::string, std::pair<const LayerDesc*, const GraphTensor*>> first;
  for (LayerDesc& l : b.layers) {
    for (GraphTensor& t : l.initial) {
      if (t.name.empty()) continue;
      const auto [it, inserted] = first.emplace(t.name, std::make_pair(&l, &t));
      if (inserted) continue;
      const LayerDesc& owner = *it->second.first;
      const GraphTensor& o = *it->second.second;
      if (&owner == &l || o.dims != t.dims || *o.values != *t.values)
        throw std::invalid_argument(
            b.source + ": initializer '" + t.name + "' is trained by layer '" + owner.name + "' (" + owner.op + ") as " +
            shape_string(o.dims) + " and by layer '" + l.name + "' (" + l.op + ") as " + shape_string(t.dims) +
            (o.dims == t.dims ? " in another layout" : "") +
            "; the engine ties a weight shared by two nodes only in one layout (an embedding table and a "
            "linear layer reading it transposed, or one weight used twice): export the second use as "
            "MatMul(x, Transpose(weight)) or Gemm with transB=1, or give it a weight of its own");
      t.tied = true;
      l.parameter_count -= int64_t(t.values->size());
    }
  }
}

void bind_output(Builder& b, ModelDesc& m) {
  if (b.graph->outputs.size() != 1)
    throw std::invalid_argument(b.source + ": the graph has " + std::to_string(b.graph->outputs.size()) +
                                " outputs; the engine trains one (the logits): export only the logits");
  const std::string& name = b.graph->outputs[0].name;
  const auto it = b.values.find(name);
  if (it == b.values.end() || it->second.constant || it->second.producer < 0)
    throw std::invalid_argument(b.source + ": the graph output '" + name + "' is not computed by a node");
  const Shape& out = it->second.shape;
  m.root.graph_inputs = {it->second.producer};
  m.root.out_shape = out;
  if (m.input_kind == InputKind::TOKENS) {
    m.task = ModelTask::LANGUAGE_MODEL;
    m.vocab = b.vocab;
    if (out.size() != 2 || out[0] != m.input_shape[0] || out[1] != b.vocab)
      throw std::invalid_argument(b.source + ": a token model must output (seq_len, vocab) = (" +
                                  std::to_string(m.input_shape[0]) + ", " + std::to_string(b.vocab) +
                                  ") logits per sample (next-token prediction), got " + shape_string(out));
  } else {
    m.task = ModelTask::CLASSIFICATION;
    if (out.size() != 1)
      throw std::invalid_argument(b.source + ": an image model must output (classes) logits per sample, got " +
                                  shape_string(out) + "; end the graph with Flatten + Gemm");
    m.classes = out[0];
  }
}

}  // namespace

std::string onnx_supported_ops() {
  std::string out;
  for (const std::string& op : onnx_build::supported_ops()) out += (out.empty() ? "" : ", ") + op;
  return out;
}

bool is_onnx_path(const std::string& path) { return std::filesystem::path(path).extension() == ".onnx"; }

ModelDesc model_desc_from_onnx(std::string_view bytes, const std::string& source_name, const std::string& model_name) {
  onnx::Model model;
  try {
    model = onnx::parse_model(bytes);
  } catch (const onnx::OnnxFormatError& e) {
    throw onnx::OnnxFormatError(source_name + ": " + e.what());
  }
  Builder b;
  b.source = source_name;
  b.graph = &model.graph;
  ModelDesc m;
  m.source = source_name;
  m.name = model_name.empty() ? std::filesystem::path(source_name).stem().string() : model_name;
  if (m.name.empty()) m.name = model.graph.name;
  for (const auto& t : model.graph.initializers) {
    Value v;
    v.constant = true;
    v.initializer = true;
    v.data = t;
    b.values[t->name] = v;
  }
  for (const onnx::Node& n : model.graph.nodes) {
    // Every op the engine maps or folds produces a value; the fusions look ahead at later nodes'
    // outputs, so a node without one is refused here, before any of them runs.
    if (n.outputs.empty() || n.outputs[0].empty())
      b.fail(n, "has no output (every node must name its first output; re-export the model)");
    for (const std::string& i : n.inputs) ++b.uses[i];
  }
  bind_input(b, m);
  // Refuse unsupported ops up front, all of them at once, before building anything.
  std::string unsupported;
  for (const onnx::Node& n : model.graph.nodes) {
    const auto& ops = onnx_build::supported_ops();
    const bool known = std::binary_search(ops.begin(), ops.end(), n.op_type) || n.op_type == "Constant" ||
                       n.op_type == "Identity" || n.op_type == "Cast" || n.op_type == "Unsqueeze";
    if (!known || (!n.domain.empty() && n.domain != "ai.onnx"))
      unsupported += (unsupported.empty() ? "" : "; ") + std::string("node '") + n.name + "' (" +
                     (n.domain.empty() ? "" : n.domain + ".") + n.op_type + ")";
  }
  if (!unsupported.empty())
    throw std::invalid_argument(source_name + ": unsupported ONNX ops: " + unsupported + ". The engine trains " +
                                onnx_supported_ops() + " (and folds Constant, Identity, Cast, Unsqueeze of constants)");
  for (const onnx::Node& n : model.graph.nodes)  // Constants first: fusions look ahead at their operands
    if (n.op_type == "Constant") fold_constant(b, n);
  for (size_t i = 0; i < model.graph.nodes.size(); ++i) {
    const onnx::Node& n = model.graph.nodes[i];
    if (n.op_type == "Constant") continue;
    if (b.consumed.count(n.outputs[0])) continue;
    if (fold_constant(b, n)) continue;
    if (n.op_type == "Identity") {
      b.values[n.outputs.at(0)] = b.value(n, 0);
      continue;
    }
    if (!onnx_build::map_node(b, n, i))
      b.fail(n, "this use of " + n.op_type + " is not supported (on activations the engine runs " +
                    onnx_supported_ops() + ")");
  }
  if (b.layers.empty()) throw std::invalid_argument(source_name + ": the graph has no nodes the engine can train");
  tie_shared_initializers(b);
  bind_output(b, m);
  m.root.name = "";
  m.root.kind = LayerKind::GRAPH;
  m.root.op = "graph";
  m.root.in_shape = m.input_shape;
  m.root.children = std::move(b.layers);
  m.hash = model_desc_hash(m);
  return m;
}

ModelDesc model_desc_load_onnx(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot read ONNX model '" + path + "'; pass an existing .onnx file");
  std::ostringstream s;
  s << f.rdbuf();
  return model_desc_from_onnx(s.str(), path);
}

}  // namespace qsync
