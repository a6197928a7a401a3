// File: planner/model_desc.cpp
// Model files: the top level (name, task, input, classes, layers), the task checks, the model
// hash, the model zoo lookup and the tree queries. Layers are built by model_layers.cpp.
#include "planner/model_desc.h"
#include "planner/model_onnx.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "planner/model_layers.h"

#ifndef QSYNC_MODEL_ZOO_DIR
#define QSYNC_MODEL_ZOO_DIR "examples/models"
#endif

namespace qsync {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& msg) {
  throw std::invalid_argument(source + ": " + msg);
}

void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& source,
                const std::string& where) {
  for (const auto& kv : map) {
    std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string guess = model_layers::closest_spelling(key, allowed), list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail(source, where + "unknown key '" + key + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
                     "; the keys are: " + list);
  }
}

std::string scalar(const YAML::Node& map, const char* key, const std::string& source, const char* meaning) {
  YAML::Node v = map[key];
  if (!v) fail(source, std::string("missing '") + key + "' (" + meaning + ")");
  if (!v.IsScalar() || v.Scalar().empty()) fail(source, std::string("'") + key + "' must be " + meaning);
  return v.Scalar();
}

int64_t positive(const YAML::Node& v, const std::string& source, const std::string& what) {
  int64_t x = 0;
  try {
    if (v && v.IsScalar()) x = v.as<int64_t>();
  } catch (const YAML::Exception&) {
  }
  if (x < 1 || x > (int64_t(1) << 40))
    fail(source, what + " must be a positive integer, got " + (v && v.IsScalar() ? "'" + v.Scalar() + "'" : "none"));
  return x;
}

void parse_input(const YAML::Node& input, ModelDesc& m) {
  const std::string& src = m.source;
  if (!input) fail(src, "missing 'input' ({kind: image, shape: [C, H, W]} or {kind: tokens, seq_len: T, vocab: V})");
  if (!input.IsMap())
    fail(src, "'input' must be a mapping: {kind: image, shape: [C, H, W]} or {kind: tokens, seq_len: T, vocab: V}");
  std::string kind = scalar(input, "kind", src, "the input kind, image or tokens");
  if (kind == "image") {
    m.input_kind = InputKind::IMAGE;
    check_keys(input, {"kind", "shape"}, src, "input: ");
    YAML::Node shape = input["shape"];
    if (!shape || !shape.IsSequence() || shape.size() != 3)
      fail(src, "input: an image input needs 'shape: [C, H, W]' (three positive integers, e.g. [1, 28, 28])");
    for (size_t i = 0; i < 3; ++i) m.input_shape.push_back(positive(shape[i], src, "input shape[" + std::to_string(i) + "]"));
  } else if (kind == "tokens") {
    m.input_kind = InputKind::TOKENS;
    check_keys(input, {"kind", "seq_len", "vocab"}, src, "input: ");
    m.input_shape = {positive(input["seq_len"], src, "input: 'seq_len' (tokens per sample)")};
    m.vocab = positive(input["vocab"], src, "input: 'vocab' (the vocabulary size)");
  } else {
    fail(src, "input: unknown kind '" + kind + "'; use image or tokens");
  }
}

void check_task(const ModelDesc& m) {
  const Shape& out = m.root.out_shape;
  if (m.task == ModelTask::CLASSIFICATION) {
    if (out != Shape{m.classes})
      fail(m.source, "the model outputs " + shape_string(out) + " per sample but a classification model must output (" +
                         std::to_string(m.classes) + ") logits (classes: " + std::to_string(m.classes) +
                         "); end with a linear of out: " + std::to_string(m.classes) + " after flatten or global_avg_pool");
    return;
  }
  if (m.input_kind != InputKind::TOKENS)
    fail(m.source, "task language_model needs a tokens input ({kind: tokens, seq_len: T, vocab: V})");
  Shape want = {m.input_shape[0], m.vocab};
  if (out != want)
    fail(m.source, "the model outputs " + shape_string(out) + " per sample but a language model must output " +
                       shape_string(want) + " (seq_len, vocab); end with a linear of out: " + std::to_string(m.vocab));
}

void walk(const LayerDesc& l, const std::function<void(const LayerDesc&, int)>& fn, int depth = 0) {
  fn(l, depth);
  for (const LayerDesc& c : l.children) walk(c, fn, depth + 1);
}

std::string number(double x) {
  char buffer[64];
  auto r = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, r.ptr);
}

// The canonical text the hash is taken over: input, task and every layer of the expanded tree
// with its kind, attributes and shapes. The model's name is left out: it is checked on its own.
std::string canonical_text(const ModelDesc& m) {
  std::string t = "input " + std::string(m.input_kind == InputKind::IMAGE ? "image " : "tokens ") +
                  shape_string(m.input_shape) + " vocab " + std::to_string(m.vocab) + "\n";
  t += "task " + std::string(m.task == ModelTask::CLASSIFICATION ? "classification" : "language_model") +
       " classes " + std::to_string(m.classes) + "\n";
  walk(m.root, [&](const LayerDesc& l, int depth) {
    t += std::string(size_t(depth) * 2, ' ') + "'" + l.name + "' " + layer_kind_name(l.kind) +
         " out=" + std::to_string(l.out) + " kernel=" + std::to_string(l.kernel) +
         " stride=" + std::to_string(l.stride) + " padding=" + std::to_string(l.padding) +
         " heads=" + std::to_string(l.heads) + " bias=" + (l.bias ? "1" : "0") +
         " causal=" + (l.causal ? "1" : "0") + " p=" + number(l.p) + " in=" + shape_string(l.in_shape) +
         " out=" + shape_string(l.out_shape) + " params=" + std::to_string(l.parameter_count);
    if (!l.op.empty() || !l.graph_inputs.empty()) {  // ONNX graph nodes (YAML models hash as before)
      t += " op=" + l.op + " from=";
      for (int i : l.graph_inputs) t += std::to_string(i) + ",";
      t += " axes=";
      for (int64_t a : l.axes) t += std::to_string(a) + ",";
      t += " eps=" + number(l.eps) + " momentum=" + number(l.momentum);
      for (const GraphTensor& c : l.constants) t += " const=" + c.name + shape_string(c.dims);
      for (const GraphTensor& c : l.initial) t += " init=" + c.name + shape_string(c.dims) + (c.tied ? " tied" : "");
    }
    t += "\n";
  });
  return t;
}

uint64_t fnv1a_64(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (__builtin_mul_overflow(n, d, &n))
      throw std::invalid_argument("shape " + shape_string(s) + " has more elements than a 64-bit count holds: "
                                  "check the model's dimensions");
  }
  return n;
}

std::string shape_string(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::SEQUENTIAL: return "sequential";
    case LayerKind::RESIDUAL: return "residual";
    case LayerKind::LINEAR: return "linear";
    case LayerKind::CONV2D: return "conv2d";
    case LayerKind::ATTENTION: return "attention";
    case LayerKind::RELU: return "relu";
    case LayerKind::GELU: return "gelu";
    case LayerKind::MAXPOOL2D: return "maxpool2d";
    case LayerKind::GLOBAL_AVG_POOL: return "global_avg_pool";
    case LayerKind::FLATTEN: return "flatten";
    case LayerKind::TO_TOKENS: return "to_tokens";
    case LayerKind::POSITIONAL: return "positional";
    case LayerKind::LAYERNORM: return "layernorm";
    case LayerKind::EMBEDDING: return "embedding";
    case LayerKind::DROPOUT: return "dropout";
    case LayerKind::GRAPH: return "graph";
    case LayerKind::BATCHNORM: return "batchnorm";
    case LayerKind::UNARY: return "unary";
    case LayerKind::BINARY: return "binary";
    case LayerKind::SOFTMAX: return "softmax";
    case LayerKind::AVGPOOL2D: return "avgpool2d";
    case LayerKind::RESHAPE: return "reshape";
    case LayerKind::TRANSPOSE: return "transpose";
    case LayerKind::CONCAT: return "concat";
    case LayerKind::MATMUL: return "matmul";
    case LayerKind::GATHER: return "gather";
    case LayerKind::WHERE: return "where";
    case LayerKind::PAD: return "pad";
  }
  return "unknown";
}

ModelDesc model_desc_parse(const std::string& yaml_text, const std::string& source_name) {
  ModelDesc m;
  m.source = source_name;
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string at = e.mark.is_null() ? "" : " at line " + std::to_string(e.mark.line + 1) + ", column " +
                                                 std::to_string(e.mark.column + 1);
    throw std::invalid_argument(source_name + ": malformed YAML" + at + ": " + e.msg + "; fix the syntax there");
  }
  if (!doc.IsMap())
    fail(source_name, "a model file must be a YAML mapping with name, task, input and layers (see planner/model_desc.h)");
  check_keys(doc, {"name", "task", "input", "classes", "layers"}, source_name, "");
  m.name = scalar(doc, "name", source_name, "the model's name, e.g. cnn-fmnist");
  std::string task = scalar(doc, "task", source_name, "classification or language_model");
  if (task == "classification") m.task = ModelTask::CLASSIFICATION;
  else if (task == "language_model") m.task = ModelTask::LANGUAGE_MODEL;
  else fail(source_name, "unknown task '" + task + "'; use classification or language_model");
  parse_input(doc["input"], m);
  if (m.task == ModelTask::CLASSIFICATION) {
    if (!doc["classes"]) fail(source_name, "missing 'classes' (the number of classes a classification model predicts)");
    m.classes = positive(doc["classes"], source_name, "'classes' (the number of classes)");
  } else if (doc["classes"]) {
    fail(source_name, "'classes' applies to classification only; a language model predicts the vocabulary: remove it");
  }
  if (!doc["layers"]) fail(source_name, "missing 'layers' (the list of the model's layers)");

  model_layers::BuildContext ctx;
  ctx.source = source_name;
  ctx.vocab = m.vocab;
  m.root.name = "";
  m.root.kind = LayerKind::SEQUENTIAL;
  m.root.children = model_layers::build_layer_list(doc["layers"], m.input_shape, m.input_kind == InputKind::TOKENS,
                                                   ctx, "layers");
  m.root.in_shape = m.input_shape;
  m.root.out_shape = m.root.children.back().out_shape;
  check_task(m);
  m.hash = fnv1a_64(canonical_text(m));
  return m;
}

ModelDesc model_desc_load(const std::string& path) {
  std::string text;
  try {
    text = file_read_all(path);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string(e.what()) + "; pass the path of a model YAML file");
  }
  return model_desc_parse(text, path);
}

std::string model_zoo_dir() {
  const char* env = std::getenv("QSYNC_MODEL_ZOO");
  return env && *env ? env : QSYNC_MODEL_ZOO_DIR;
}

std::vector<std::string> model_zoo_names() {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(model_zoo_dir(), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->path().extension() == ".yaml" && it->is_regular_file(ignored)) names.push_back(it->path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelDesc model_desc_find(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec))
    return is_onnx_path(name_or_path) ? model_desc_load_onnx(name_or_path) : model_desc_load(name_or_path);
  std::string dir = model_zoo_dir();
  bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                         fs::path(name_or_path).extension() == ".yaml" || fs::path(name_or_path).extension() == ".yml" ||
                         is_onnx_path(name_or_path);
  if (!looks_like_path && !name_or_path.empty()) {
    std::string zoo_file = (fs::path(dir) / (name_or_path + ".yaml")).string();
    if (fs::is_regular_file(zoo_file, ec)) return model_desc_load(zoo_file);
  }
  std::string zoo;
  for (const std::string& n : model_zoo_names()) zoo += (zoo.empty() ? "" : ", ") + n;
  if (zoo.empty()) zoo = "none: the directory is missing or has no .yaml files";
  if (looks_like_path)
    throw std::invalid_argument("model file '" + name_or_path + "' does not exist; pass an existing model YAML, an .onnx file or "
                                "the name of a zoo model in " + dir + " (" + zoo + ")");
  throw std::invalid_argument("unknown model '" + name_or_path + "': no such file, and no '" + name_or_path +
                              ".yaml' in the model zoo " + dir + " (models there: " + zoo +
                              "); pass a model file path or a zoo name, or set QSYNC_MODEL_ZOO to another zoo");
}

uint64_t model_desc_hash(const ModelDesc& m) { return fnv1a_64(canonical_text(m)); }

std::string model_hash_string(uint64_t hash) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(hash));
  return buffer;
}

std::vector<const LayerDesc*> model_gemm_layers(const ModelDesc& m) {
  std::vector<const LayerDesc*> out;
  walk(m.root, [&](const LayerDesc& l, int) {
    if (l.kind == LayerKind::LINEAR || l.kind == LayerKind::CONV2D) out.push_back(&l);
  });
  return out;
}

std::vector<const LayerDesc*> model_leaf_layers(const ModelDesc& m) {
  std::vector<const LayerDesc*> out;
  std::function<void(const LayerDesc&)> visit = [&](const LayerDesc& l) {
    if (l.kind == LayerKind::SEQUENTIAL || l.kind == LayerKind::RESIDUAL || l.kind == LayerKind::GRAPH) {
      for (const LayerDesc& c : l.children) visit(c);
    } else {
      out.push_back(&l);  // attention is one leaf; its qkv and proj are not visited
    }
  };
  visit(m.root);
  return out;
}

int64_t model_parameter_count(const ModelDesc& m) {
  int64_t n = 0;
  walk(m.root, [&](const LayerDesc& l, int) { n += l.parameter_count; });
  return n;
}

}  // namespace qsync
