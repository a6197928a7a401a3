// File: worker/tp/transformer_weights.cpp
// TransformerWeights from a live Model (walking its description: embedding, transformer blocks,
// final layernorm, linear head) or from a `qsync-worker train` checkpoint, and the tensor-parallel
// layouts (contiguous, and the check of any layout against the weights). The weights file format
// is in transformer_weights_file.cpp.
#include "worker/tp/transformer_weights.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "planner/model_desc.h"
#include "worker/checkpoint.h"
#include "worker/model.h"
#include "worker/optimizer.h"

namespace qsync {
namespace {

// The parameters of a model by name ("blocks.0.attn.qkv.weight" -> its FP32 values).
class ParameterTable {
 public:
  explicit ParameterTable(const Model& model) {
    for (const Parameter* p : model.parameters()) by_name_[p->name] = p;
  }
  // The values of `name`, checked to hold `numel` floats.
  std::vector<float> get(const std::string& name, int64_t numel) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw std::invalid_argument("transformer weights: the model has no parameter '" + name +
                                  "'; TP inference needs char-GPT-style layers (embedding, transformer_block, "
                                  "layernorm, linear head)");
    const Tensor& t = it->second->value;
    if (t.numel() != numel)
      throw std::invalid_argument("transformer weights: parameter '" + name + "' has " + std::to_string(t.numel()) +
                                  " values, expected " + std::to_string(numel));
    return std::vector<float>(t.f32(), t.f32() + numel);
  }
  // A bias that may be absent (linear with bias: false): zeros then.
  std::vector<float> get_or_zeros(const std::string& name, int64_t numel) const {
    if (by_name_.count(name) == 0) return std::vector<float>(size_t(numel), 0.0f);
    return get(name, numel);
  }

 private:
  std::map<std::string, const Parameter*> by_name_;
};

[[noreturn]] void structure_error(const std::string& layer, const std::string& what) {
  throw std::invalid_argument("transformer weights: layer '" + layer + "' " + what +
                              "; TP inference runs char-GPT-style models: embedding, transformer_block..., "
                              "layernorm, linear head (see examples/models/char-gpt.yaml)");
}

// The children of a residual body with dropouts skipped (identity at inference).
std::vector<const LayerDesc*> body_without_dropout(const LayerDesc& res) {
  std::vector<const LayerDesc*> out;
  for (const LayerDesc& c : res.children)
    if (c.kind != LayerKind::DROPOUT) out.push_back(&c);
  return out;
}

BlockWeights block_from(const LayerDesc& block, const ParameterTable& params, int64_t C, int64_t& F,
                        bool& causal) {
  if (block.kind != LayerKind::SEQUENTIAL || block.children.size() != 2 ||
      block.children[0].kind != LayerKind::RESIDUAL || block.children[1].kind != LayerKind::RESIDUAL)
    structure_error(block.name, "is not a transformer_block (two residual parts: attention, MLP)");
  const std::vector<const LayerDesc*> attn_body = body_without_dropout(block.children[0]);
  const std::vector<const LayerDesc*> mlp_body = body_without_dropout(block.children[1]);
  if (attn_body.size() != 2 || attn_body[0]->kind != LayerKind::LAYERNORM || attn_body[1]->kind != LayerKind::ATTENTION)
    structure_error(block.children[0].name, "is not [layernorm, attention]");
  if (mlp_body.size() != 4 || mlp_body[0]->kind != LayerKind::LAYERNORM || mlp_body[1]->kind != LayerKind::LINEAR ||
      mlp_body[2]->kind != LayerKind::GELU || mlp_body[3]->kind != LayerKind::LINEAR)
    structure_error(block.children[1].name, "is not [layernorm, linear, gelu, linear]");
  const LayerDesc& attn = *attn_body[1];
  if (attn.children.size() != 2) structure_error(attn.name, "has no qkv and proj projections");
  if (attn.heads < 1 || C % attn.heads != 0)
    structure_error(attn.name, "has " + std::to_string(attn.heads) + " heads, which do not divide the width " +
                                   std::to_string(C));
  const int64_t f = mlp_body[1]->out;
  if (F == 0) F = f;
  if (f != F)
    structure_error(mlp_body[1]->name, "has MLP width " + std::to_string(f) + " but an earlier block has " +
                                           std::to_string(F) + " (all blocks must share one MLP width)");
  if (mlp_body[3]->out != C) structure_error(mlp_body[3]->name, "does not map back to the width " + std::to_string(C));
  causal = causal && attn.causal;

  BlockWeights b;
  b.heads = attn.heads;
  const std::string& ln1 = attn_body[0]->name;
  const std::string& qkv = attn.children[0].name;
  const std::string& proj = attn.children[1].name;
  const std::string& ln2 = mlp_body[0]->name;
  const std::string& fc1 = mlp_body[1]->name;
  const std::string& fc2 = mlp_body[3]->name;
  b.ln1_gain = params.get(ln1 + ".weight", C);
  b.ln1_bias = params.get(ln1 + ".bias", C);
  b.qkv_weight = params.get(qkv + ".weight", 3 * C * C);
  b.qkv_bias = params.get_or_zeros(qkv + ".bias", 3 * C);
  b.proj_weight = params.get(proj + ".weight", C * C);
  b.proj_bias = params.get_or_zeros(proj + ".bias", C);
  b.ln2_gain = params.get(ln2 + ".weight", C);
  b.ln2_bias = params.get(ln2 + ".bias", C);
  b.fc1_weight = params.get(fc1 + ".weight", F * C);
  b.fc1_bias = params.get_or_zeros(fc1 + ".bias", F);
  b.fc2_weight = params.get(fc2 + ".weight", C * F);
  b.fc2_bias = params.get_or_zeros(fc2 + ".bias", C);
  return b;
}

}  // namespace

TransformerWeights transformer_weights_from_model(const Model& model) {
  const ModelDesc& desc = model.desc();
  if (desc.task != ModelTask::LANGUAGE_MODEL || desc.input_kind != InputKind::TOKENS || desc.input_shape.size() != 1)
    throw std::invalid_argument("transformer weights: model '" + desc.name +
                                "' is not a token language model; TP inference runs char-GPT-style models");
  const std::vector<LayerDesc>& layers = desc.root.children;
  if (layers.size() < 3 || layers.front().kind != LayerKind::EMBEDDING)
    structure_error(layers.empty() ? desc.name : layers.front().name, "is not a token embedding (the first layer)");
  const LayerDesc& head = layers[layers.size() - 1];
  const LayerDesc& lnf = layers[layers.size() - 2];
  if (head.kind != LayerKind::LINEAR) structure_error(head.name, "is not the linear head (the last layer)");
  if (lnf.kind != LayerKind::LAYERNORM) structure_error(lnf.name, "is not the final layernorm (before the head)");

  const ParameterTable params(model);
  TransformerWeights w;
  w.model_name = desc.name;
  w.model_hash = desc.hash;
  w.vocab = desc.vocab;
  w.max_tokens = desc.input_shape[0];
  w.width = layers.front().out;
  if (head.out != w.vocab) structure_error(head.name, "does not output the vocabulary (" + std::to_string(w.vocab) + ")");
  const int64_t C = w.width;
  for (size_t i = 1; i + 2 < layers.size(); ++i)
    w.blocks.push_back(block_from(layers[i], params, C, w.mlp_width, w.causal));
  if (w.blocks.empty()) structure_error(desc.name, "has no transformer blocks");
  if (!w.causal)
    throw std::invalid_argument("transformer weights: model '" + desc.name +
                                "' has non-causal attention; TP inference with a KV cache needs causal: true");
  const std::string& embed = layers.front().name;
  w.token_embedding = params.get(embed + ".weight", w.vocab * C);
  w.position_embedding = params.get(embed + ".position", w.max_tokens * C);
  w.lnf_gain = params.get(lnf.name + ".weight", C);
  w.lnf_bias = params.get(lnf.name + ".bias", C);
  w.head_weight = params.get(head.name + ".weight", w.vocab * C);
  w.head_bias = params.get_or_zeros(head.name + ".bias", w.vocab);
  return w;
}

TransformerWeights transformer_weights_load(const std::string& model, const std::string& checkpoint) {
  const ModelDesc desc = model_desc_find(model);
  std::string path = checkpoint;
  if (std::filesystem::is_directory(path)) path = checkpoint_path(path);
  if (!std::filesystem::is_regular_file(path))
    throw std::runtime_error("checkpoint " + path + " does not exist: pass the file (or --checkpoint-dir) that " +
                             "`qsync-worker train --model " + model + " --checkpoint-dir DIR` wrote");
  MemoryAccount memory(0, "inference");
  Model m(desc, &memory, 0);
  OptimizerConfig oc;
  oc.kind = checkpoint_optimizer_kind(path);
  Optimizer opt(oc, m.parameters(), &memory);
  checkpoint_load(path, m, opt);
  return transformer_weights_from_model(m);
}

TpLayout tp_layout_contiguous(const TransformerWeights& w, int ranks) {
  if (ranks < 1) throw std::invalid_argument("TP degree must be at least 1, got " + std::to_string(ranks));
  TpLayout layout;
  layout.ranks = ranks;
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    const int64_t H = w.blocks[b].heads;
    if (H % ranks != 0 || w.mlp_width % ranks != 0)
      throw std::invalid_argument("TP degree " + std::to_string(ranks) + " does not divide block " + std::to_string(b) +
                                  "'s " + std::to_string(H) + " heads and MLP width " + std::to_string(w.mlp_width) +
                                  " of model '" + w.model_name + "': use a TP degree that divides both");
    std::vector<std::vector<int>> heads(static_cast<size_t>(ranks));
    std::vector<int> slices(static_cast<size_t>(ranks));
    const int64_t per = H / ranks;
    for (int r = 0; r < ranks; ++r) {
      for (int64_t h = 0; h < per; ++h) heads[size_t(r)].push_back(int(r * per + h));
      slices[size_t(r)] = r;
    }
    layout.heads_of_rank.push_back(std::move(heads));
    layout.mlp_slice_of_rank.push_back(std::move(slices));
  }
  return layout;
}

void tp_layout_check(const TransformerWeights& w, const TpLayout& layout) {
  const int N = layout.ranks;
  const size_t L = w.blocks.size();
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("TP layout for " + std::to_string(N) + " ranks does not fit model '" + w.model_name +
                                "': " + what);
  };
  if (N < 1) fail("the TP degree must be at least 1");
  if (layout.heads_of_rank.size() != L || layout.mlp_slice_of_rank.size() != L)
    fail("it describes " + std::to_string(layout.heads_of_rank.size()) + " blocks (heads) and " +
         std::to_string(layout.mlp_slice_of_rank.size()) + " (MLP slices), the model has " + std::to_string(L));
  if (w.mlp_width % N != 0)
    fail("the MLP width " + std::to_string(w.mlp_width) + " is not divisible by " + std::to_string(N));
  for (size_t b = 0; b < L; ++b) {
    const std::string where = "block " + std::to_string(b) + ": ";
    const int64_t H = w.blocks[b].heads;
    if (H % N != 0) fail(where + std::to_string(H) + " heads are not divisible by " + std::to_string(N));
    if (layout.heads_of_rank[b].size() != size_t(N) || layout.mlp_slice_of_rank[b].size() != size_t(N))
      fail(where + "it needs one head list and one MLP slice per rank");
    std::vector<int> head_owner(size_t(H), -1), slice_owner(size_t(N), -1);
    for (int r = 0; r < N; ++r) {
      const std::vector<int>& heads = layout.heads_of_rank[b][size_t(r)];
      if (int64_t(heads.size()) != H / N)
        fail(where + "rank " + std::to_string(r) + " owns " + std::to_string(heads.size()) + " heads, expected " +
             std::to_string(H / N) + " (an even split)");
      for (int h : heads) {
        if (h < 0 || h >= H) fail(where + "head " + std::to_string(h) + " is outside 0.." + std::to_string(H - 1));
        if (head_owner[size_t(h)] >= 0)
          fail(where + "head " + std::to_string(h) + " is owned by ranks " + std::to_string(head_owner[size_t(h)]) +
               " and " + std::to_string(r));
        head_owner[size_t(h)] = r;
      }
      const int s = layout.mlp_slice_of_rank[b][size_t(r)];
      if (s < 0 || s >= N) fail(where + "MLP slice " + std::to_string(s) + " is outside 0.." + std::to_string(N - 1));
      if (slice_owner[size_t(s)] >= 0)
        fail(where + "MLP slice " + std::to_string(s) + " is owned by ranks " + std::to_string(slice_owner[size_t(s)]) +
             " and " + std::to_string(r));
      slice_owner[size_t(s)] = r;
    }
  }
}

}  // namespace qsync
