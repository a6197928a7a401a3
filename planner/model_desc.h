// File: planner/model_desc.h
// The model description: what a YAML model file says, expanded and shape-checked. The planner
// reads it to cost a plan; the worker builds its layers from it. One source of truth for layer
// names (the keys of plan files) and per-sample shapes.
//
// A model file (examples/models/*.yaml):
//   name: cnn-fmnist
//   task: classification          # or language_model
//   input: {kind: image, shape: [1, 28, 28]}      # or {kind: tokens, seq_len: 64, vocab: 96}
//   classes: 10                   # classification only
//   layers:
//     - {name: conv1, type: conv2d, out_channels: 32, kernel: 3, padding: 1}
//     - {name: relu1, type: relu}
//     - {name: blocks.0, type: transformer_block, heads: 4, mlp_ratio: 2, causal: true}
//     ...
// Layer types: linear {out, bias}, conv2d {out_channels, kernel, stride, padding, bias}, relu,
// gelu, maxpool2d {kernel, stride}, global_avg_pool, flatten, to_tokens, positional,
// layernorm, embedding {dim} (+ learned positions), attention {heads, causal}, dropout {p},
// residual {layers}, transformer_block {heads, mlp_ratio, causal, dropout} (expands to
// residual[layernorm, attention] + residual[layernorm, linear, gelu, linear]).
// Expansion names, for a block B (a SEQUENTIAL): B.attn_res{B.ln1, B.attn{B.attn.qkv, B.attn.proj},
// B.attn_drop}, B.mlp_res{B.ln2, B.mlp.fc1, B.mlp.gelu, B.mlp.fc2, B.mlp_drop}; the dropouts only
// when dropout > 0 (mlp_ratio defaults to 4). An attention layer A holds A.qkv (out 3C) and A.proj
// (out C). Layer names are used as written (residual bodies are not prefixed) and unique model-wide.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qsync {

using Shape = std::vector<int64_t>;  // per sample, batch excluded
int64_t shape_numel(const Shape& s);
std::string shape_string(const Shape& s);  // "(32, 14, 14)"

enum class LayerKind : uint8_t {
  SEQUENTIAL, RESIDUAL,  // containers
  LINEAR, CONV2D, ATTENTION,  // GEMM-like (ATTENTION owns two LINEAR children: qkv, proj)
  RELU, GELU, MAXPOOL2D, GLOBAL_AVG_POOL, FLATTEN, TO_TOKENS, POSITIONAL, LAYERNORM, EMBEDDING, DROPOUT,
  // ONNX graphs (planner/model_onnx.h): GRAPH runs its children as a DAG (their graph_inputs);
  // the kinds below are its nodes' own (the ones above are reused where they match).
  GRAPH, BATCHNORM, UNARY, BINARY, SOFTMAX, AVGPOOL2D, RESHAPE, TRANSPOSE, CONCAT, MATMUL, GATHER, WHERE,
  PAD,  // zero padding, negative amounts crop (ONNX Pad; each output of Split)
};
const char* layer_kind_name(LayerKind k);  // the YAML spelling

// A tensor an ONNX graph node carries: a constant operand or a parameter's initial value.
struct GraphTensor {
  std::string name;  // the ONNX initializer (or Constant) it came from
  Shape dims;        // its ONNX dims (an operand broadcasts against the full (B, ...) shape)
  std::shared_ptr<const std::vector<float>> values;  // row-major, shape_numel(dims) entries
  // An initial value: true when an earlier layer of the graph trains the same initializer (`name`,
  // same dims and values: tied embeddings); the layer then shares that layer's parameter (one
  // parameter, the gradients of both uses summed) and does not count it in its parameter_count.
  // An empty name is never tied.
  bool tied = false;
};

struct LayerDesc {
  std::string name;  // dotted path, unique: "blocks.0.attn.qkv"
  LayerKind kind = LayerKind::SEQUENTIAL;
  // Attributes (those that apply to `kind`; others keep their defaults).
  int64_t out = 0;           // linear: output features; conv2d: out_channels; embedding: dim
  int64_t kernel = 0, stride = 1, padding = 0;
  int64_t heads = 0;         // attention
  int64_t vocab = 0;  // embedding: vocabulary size
  bool bias = true;          // linear, conv2d
  bool causal = false;       // attention
  double p = 0.0;            // dropout probability
  std::vector<LayerDesc> children;  // sequential/residual bodies; attention: {qkv, proj}
  // Resolved by shape inference:
  Shape in_shape, out_shape;
  int64_t parameter_count = 0;  // this layer's own parameters (children excluded)
  // GEMM-like leaves (LINEAR, CONV2D): the forward GEMM per sample is (rows, n) = (rows, k) x (k, n)^T
  int64_t gemm_rows = 0, gemm_n = 0, gemm_k = 0;
  // Nodes of an ONNX graph (children of a GRAPH; see planner/model_onnx.h):
  std::string op;                      // the ONNX op type ("Conv", "Add", ...); empty for YAML layers
  std::vector<int> graph_inputs;       // activation inputs: -1 the model input, i the output of child i
                                       // (a GRAPH itself: {the child whose output is the model's})
  std::vector<Shape> input_shapes;     // their per-sample shapes (in_shape is the first)
  std::vector<GraphTensor> constants;  // constant operands (BINARY, WHERE) and kept state (BATCHNORM)
  std::vector<GraphTensor> initial;    // initial parameter values, in the layer's parameter order
  std::vector<int64_t> axes;           // TRANSPOSE: perm; CONCAT, SOFTMAX: axis (per sample, batch excluded);
                                       // PAD: per-sample amounts before (r entries) then after (r), < 0 crops;
                                       // BINARY, WHERE: per operand, 1 an activation, 0 a constant, 2 a
                                       // trained parameter (BINARY; its initial value in `initial`)
  double eps = 1e-5, momentum = 0.9;   // BATCHNORM (ONNX momentum: running = running * m + batch * (1 - m))
};

enum class ModelTask : uint8_t { CLASSIFICATION, LANGUAGE_MODEL };
enum class InputKind : uint8_t { IMAGE, TOKENS };

struct ModelDesc {
  std::string name;
  std::string source;  // the file it came from
  ModelTask task = ModelTask::CLASSIFICATION;
  InputKind input_kind = InputKind::IMAGE;
  Shape input_shape;       // image: (C, H, W); tokens: (seq_len)
  int64_t classes = 0;     // classification: the logits width
  int64_t vocab = 0;       // tokens: vocabulary size (also the LM logits width)
  LayerDesc root;          // a SEQUENTIAL named "" holding the layers
  uint64_t hash = 0;       // of the expanded description: checkpoints and plans name their model by it
};

// Parses and shape-checks a model file. Errors (malformed YAML, unknown type, missing attribute,
// shape mismatch) throw std::invalid_argument naming the file, the layer and the fix.
ModelDesc model_desc_load(const std::string& path);
ModelDesc model_desc_parse(const std::string& yaml_text, const std::string& source_name);
// A path to a file, or the name of a zoo model ("cnn" -> examples/models/cnn.yaml).
ModelDesc model_desc_find(const std::string& name_or_path);
std::vector<std::string> model_zoo_names();
// The zoo directory: $QSYNC_MODEL_ZOO when set, else the source tree's examples/models.
std::string model_zoo_dir();
// The hash of an expanded description (its canonical text): set by the parsers.
uint64_t model_desc_hash(const ModelDesc& m);
// A model hash as plan files and checkpoints spell it: 16 lower-case hex digits.
std::string model_hash_string(uint64_t hash);

// The GEMM-like leaves (LINEAR and CONV2D, including attention's qkv and proj) in forward
// order: the layers a plan assigns precisions to.
std::vector<const LayerDesc*> model_gemm_layers(const ModelDesc& m);
// Every leaf layer in forward order (containers excluded; attention counts as one leaf).
std::vector<const LayerDesc*> model_leaf_layers(const ModelDesc& m);
int64_t model_parameter_count(const ModelDesc& m);

}  // namespace qsync
