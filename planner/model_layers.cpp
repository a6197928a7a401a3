// File: planner/model_layers.cpp
// Builds model layers from their YAML nodes: per-type attribute checks with typo hints, layer
// names (valid, unique), then shape inference (model_shapes.cpp). See planner/model_desc.h.
#include "planner/model_layers.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace qsync::model_layers {
namespace {

struct AttrSpec {
  const char* key;
  const char* meaning;  // said when the attribute is missing or wrong
};
struct TypeSpec {
  const char* type;  // the YAML spelling
  LayerKind kind;    // transformer_block: SEQUENTIAL (it expands)
  std::vector<AttrSpec> attrs;  // besides name and type
};

const AttrSpec BIAS{"bias", "true or false: whether to add a learned bias"};
const AttrSpec KERNEL{"kernel", "the window size, e.g. 3"};
const AttrSpec STRIDE{"stride", "the step between windows"};
const AttrSpec HEADS{"heads", "the number of attention heads; it must divide the width"};
const AttrSpec CAUSAL{"causal", "true or false: whether a position attends only to earlier ones"};

const std::vector<TypeSpec>& type_specs() {
  static const std::vector<TypeSpec> specs = {
      {"linear", LayerKind::LINEAR, {{"out", "the number of output features"}, BIAS}},
      {"conv2d", LayerKind::CONV2D,
       {{"out_channels", "the number of output channels"}, KERNEL, STRIDE,
        {"padding", "the zero padding on each side"}, BIAS}},
      {"relu", LayerKind::RELU, {}},
      {"gelu", LayerKind::GELU, {}},
      {"maxpool2d", LayerKind::MAXPOOL2D, {KERNEL, STRIDE}},
      {"global_avg_pool", LayerKind::GLOBAL_AVG_POOL, {}},
      {"flatten", LayerKind::FLATTEN, {}},
      {"to_tokens", LayerKind::TO_TOKENS, {}},
      {"positional", LayerKind::POSITIONAL, {}},
      {"layernorm", LayerKind::LAYERNORM, {}},
      {"embedding", LayerKind::EMBEDDING, {{"dim", "the embedding width"}}},
      {"attention", LayerKind::ATTENTION, {HEADS, CAUSAL}},
      {"dropout", LayerKind::DROPOUT, {{"p", "the drop probability, in [0, 1)"}}},
      {"residual", LayerKind::RESIDUAL, {{"layers", "the list of layers of the residual body"}}},
      {"transformer_block", LayerKind::SEQUENTIAL,
       {HEADS, {"mlp_ratio", "the MLP hidden width as a multiple of the model width"}, CAUSAL,
        {"dropout", "the drop probability after attention and after the MLP, in [0, 1)"}}},
  };
  return specs;
}

std::string yaml_kind(const YAML::Node& v) {
  switch (v.Type()) {
    case YAML::NodeType::Sequence: return v.size() == 0 ? "an empty list" : "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Null: return "no value";
    default: return "'" + v.Scalar() + "'";
  }
}

// Reads one layer's attributes; every failure names the file and the layer.
class LayerReader {
 public:
  LayerReader(const YAML::Node& node, const TypeSpec& spec, std::string label, const std::string& source)
      : node_(node), spec_(spec), label_(std::move(label)), source_(source) {}

  const std::string& label() const { return label_; }
  [[noreturn]] void fail(const std::string& msg) const {
    throw std::invalid_argument(source_ + ": " + label_ + ": " + msg);
  }

  void check_keys() const {
    std::vector<std::string> allowed = {"name", "type"};
    for (const AttrSpec& a : spec_.attrs) allowed.push_back(a.key);
    for (const auto& kv : node_) {
      std::string key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string guess = closest_spelling(key, allowed);
      std::string takes;
      for (const std::string& a : allowed) takes += (takes.empty() ? "" : ", ") + a;
      fail("unknown attribute '" + key + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
           "; " + spec_.type + " takes: " + takes);
    }
  }

  int64_t integer(const char* key, int64_t min, std::optional<int64_t> fallback = std::nullopt) const {
    YAML::Node v = value(key, fallback.has_value());
    if (!v) return *fallback;
    std::optional<int64_t> parsed;
    try {
      if (v.IsScalar()) parsed = v.as<int64_t>();
    } catch (const YAML::Exception&) {
    }
    if (!parsed)
      fail("attribute '" + std::string(key) + "' must be an integer (" + meaning(key) + "), got " + yaml_kind(v));
    int64_t x = *parsed;
    if (x < min || x > (int64_t(1) << 40))
      fail("attribute '" + std::string(key) + "' must be an integer from " + std::to_string(min) +
           " up, got " + std::to_string(x) + " (" + meaning(key) + ")");
    return x;
  }

  bool boolean(const char* key, bool fallback) const {
    YAML::Node v = value(key, true);
    if (!v) return fallback;
    try {
      if (v.IsScalar()) return v.as<bool>();
    } catch (const YAML::Exception&) {
    }
    fail("attribute '" + std::string(key) + "' must be true or false, got " + yaml_kind(v));
  }

  double probability(const char* key, std::optional<double> fallback = std::nullopt) const {
    YAML::Node v = value(key, fallback.has_value());
    if (!v) return *fallback;
    double x = -1;
    try {
      if (v.IsScalar()) x = v.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!(x >= 0 && x < 1))
      fail("attribute '" + std::string(key) + "' must be a probability in [0, 1) (" + meaning(key) +
           "), got " + yaml_kind(v));
    return x;
  }

  YAML::Node value(const char* key, bool optional) const {
    YAML::Node v = node_[key];
    if (!v && !optional) fail("missing attribute '" + std::string(key) + "' (" + meaning(key) + ")");
    return v;
  }

 private:
  std::string meaning(const std::string& key) const {
    for (const AttrSpec& a : spec_.attrs)
      if (key == a.key) return a.meaning;
    return key;
  }

  const YAML::Node& node_;
  const TypeSpec& spec_;
  std::string label_;
  const std::string& source_;
};

bool valid_name(const std::string& n) {
  if (n.empty() || n.front() == '.' || n.front() == '-' || n.back() == '.' || n.find("..") != std::string::npos)
    return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

// Records the names `l` generated (its children, for expansions); a clash fails with `r`'s label.
void register_generated(const LayerDesc& l, const LayerReader& r, BuildContext& ctx, const std::string& origin) {
  for (const LayerDesc& c : l.children) {
    auto [it, fresh] = ctx.names.emplace(c.name, origin);
    if (!fresh)
      r.fail("the generated layer name '" + c.name + "' is already used by " + it->second +
             "; rename one of them (layer names key plan files)");
    register_generated(c, r, ctx, origin);
  }
}

LayerDesc build_layer(const YAML::Node& node, size_t index, const std::string& where, const Shape& in,
                      bool token_ids, BuildContext& ctx) {
  std::string position = where + "[" + std::to_string(index) + "]";
  auto fail_at = [&](const std::string& label, const std::string& msg) {
    throw std::invalid_argument(ctx.source + ": " + label + ": " + msg);
  };
  if (!node.IsMap())
    fail_at(position, "a layer must be a mapping like {name: fc1, type: linear, out: 10}, got " + yaml_kind(node));
  YAML::Node name_node = node["name"], type_node = node["type"];
  std::string label = position;
  if (name_node && name_node.IsScalar()) label = "layer '" + name_node.Scalar() + "'";
  if (!type_node) fail_at(label, "missing attribute 'type' (one of: " + known_layer_types() + ")");
  if (!type_node.IsScalar())
    fail_at(label, "attribute 'type' must name a layer type (one of: " + known_layer_types() + "), got " +
                       yaml_kind(type_node));
  std::string type = type_node.Scalar();
  const auto& specs = type_specs();
  auto spec = std::find_if(specs.begin(), specs.end(), [&](const TypeSpec& s) { return type == s.type; });
  if (spec == specs.end()) {
    std::vector<std::string> types;
    for (const TypeSpec& s : specs) types.push_back(s.type);
    std::string guess = closest_spelling(type, types);
    fail_at(label, "unknown type '" + type + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
                       "; known types: " + known_layer_types());
  }
  LayerReader r(node, *spec, label + " (" + type + ")", ctx.source);
  if (!name_node || !name_node.IsScalar())
    r.fail("missing attribute 'name' (a unique layer name such as 'fc1'; plan files key precisions by it)");
  r.check_keys();
  std::string name = name_node.Scalar();
  if (!valid_name(name))
    r.fail("layer name '" + name + "' may use only letters, digits, '_', '-' and inner '.'; rename it");
  auto [seen, fresh] = ctx.names.emplace(name, position);
  if (!fresh)
    r.fail("duplicate layer name '" + name + "' (also used by " + seen->second +
           "); layer names must be unique because plan files key precisions by them: rename one");

  LayerDesc l;
  l.name = name;
  l.kind = spec->kind;
  try {
    switch (spec->kind) {
      case LayerKind::LINEAR:
        l.out = r.integer("out", 1);
        l.bias = r.boolean("bias", true);
        break;
      case LayerKind::CONV2D:
        l.out = r.integer("out_channels", 1);
        l.kernel = r.integer("kernel", 1);
        l.stride = r.integer("stride", 1, 1);
        l.padding = r.integer("padding", 0, 0);
        l.bias = r.boolean("bias", true);
        break;
      case LayerKind::MAXPOOL2D:
        l.kernel = r.integer("kernel", 1);
        l.stride = r.integer("stride", 1, l.kernel);
        break;
      case LayerKind::EMBEDDING: l.out = r.integer("dim", 1); break;
      case LayerKind::ATTENTION:
        l.heads = r.integer("heads", 1);
        l.causal = r.boolean("causal", false);
        break;
      case LayerKind::DROPOUT: l.p = r.probability("p"); break;
      case LayerKind::RESIDUAL: {
        if (token_ids) infer_shapes(l, in, true, ctx.vocab);  // reports the missing embedding
        l.children = build_layer_list(r.value("layers", false), in, false, ctx, "layer '" + name + "' layers");
        l.in_shape = in;
        l.out_shape = l.children.back().out_shape;
        if (l.out_shape != in)
          r.fail("the residual body maps " + shape_string(in) + " to " + shape_string(l.out_shape) +
                 "; the body must keep the shape so it can be added to its input");
        return l;
      }
      case LayerKind::SEQUENTIAL: {  // only transformer_block parses to SEQUENTIAL; it expands
        if (token_ids) infer_shapes(l, in, true, ctx.vocab);
        int64_t heads = r.integer("heads", 1), ratio = r.integer("mlp_ratio", 1, 4);
        bool causal = r.boolean("causal", false);
        double dropout = r.probability("dropout", 0.0);
        l = transformer_block(name, in, heads, ratio, causal, dropout);
        infer_shapes(l, in, false, ctx.vocab);
        register_generated(l, r, ctx, "transformer_block '" + name + "'");
        return l;
      }
      default: break;
    }
    infer_shapes(l, in, token_ids, ctx.vocab);
    register_generated(l, r, ctx, "attention '" + name + "'");
  } catch (const ShapeError& e) {
    r.fail(e.what());
  }
  return l;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<LayerDesc> build_layer_list(const YAML::Node& list, const Shape& in, bool token_ids,
                                        BuildContext& ctx, const std::string& where) {
  if (!list.IsSequence() || list.size() == 0)
    throw std::invalid_argument(ctx.source + ": " + where + ": must be a non-empty list of layers, e.g. " +
                                "[{name: fc1, type: linear, out: 10}]; got " + yaml_kind(list));
  std::vector<LayerDesc> layers;
  Shape shape = in;
  for (size_t i = 0; i < list.size(); ++i) {
    layers.push_back(build_layer(list[i], i, where, shape, token_ids && i == 0, ctx));
    shape = layers.back().out_shape;
  }
  return layers;
}

std::string known_layer_types() {
  std::string s;
  for (const TypeSpec& t : type_specs()) s += (s.empty() ? "" : ", ") + std::string(t.type);
  return s;
}

std::string closest_spelling(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

}  // namespace qsync::model_layers
