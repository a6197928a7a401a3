// File: planner/model_layers.h
// Internal to the planner (model_desc.cpp): builds the layers of a model file from their YAML
// nodes (model_layers.cpp), checking attributes, and infers per-sample shapes, parameter counts
// and GEMM dims, expanding attention and transformer_block into their children (model_shapes.cpp).
// Not part of the planner's API.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/model_desc.h"

namespace qsync::model_layers {

// What building layers needs to know about the file and the model; `names` grows as layers are
// built so duplicates are caught where they appear.
struct BuildContext {
  std::string source;  // the file, for error messages
  int64_t vocab = 0;   // tokens input: the vocabulary size (embedding parameters)
  std::map<std::string, std::string> names;  // every layer name so far -> where it came from
};

// Builds the layers of the YAML sequence `list` in forward order. `in` is the shape the first
// layer receives and `token_ids` whether that is the model's raw token input (only an embedding
// may take it). `where` names the list in errors ("layers", "layer 'res1' layers"). Throws
// std::invalid_argument naming the file, the layer and the fix.
std::vector<LayerDesc> build_layer_list(const YAML::Node& list, const Shape& in, bool token_ids,
                                        BuildContext& ctx, const std::string& where);

// A shape or size problem found by inference; the YAML builder adds the file and the layer.
struct ShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fills in_shape, out_shape, parameter_count and GEMM dims of `l` (attributes set) receiving
// `in`; containers recurse into their children, attention creates its qkv and proj. `token_ids`:
// `in` is the model's raw token input; `vocab`: its vocabulary size. Throws ShapeError.
void infer_shapes(LayerDesc& l, const Shape& in, bool token_ids, int64_t vocab);

// The expansion of transformer_block `b` receiving (tokens, width) `in`, attributes set and
// shapes not yet inferred. Throws ShapeError when `in` is not (tokens, width).
LayerDesc transformer_block(const std::string& b, const Shape& in, int64_t heads, int64_t mlp_ratio,
                            bool causal, double dropout);

// "linear, conv2d, ...": the layer types a model file may use.
std::string known_layer_types();

// The closest of `candidates` to `word` when it is a likely typo (edit distance <= 2), else "".
std::string closest_spelling(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace qsync::model_layers
