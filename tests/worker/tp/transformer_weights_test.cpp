// File: tests/worker/tp/transformer_weights_test.cpp
// TransformerWeights: taken from a live model and from `train` checkpoints (AdamW and SGD, file or
// directory), refusals (missing checkpoint, another model's checkpoint, a non-transformer model),
// the weights file round trip and its refusal of damaged files, and the TP layouts.
#include <gtest/gtest.h>

#include <fstream>

#include "planner/atomic_file.h"
#include "tests/worker/tp/tiny_gpt.h"
#include "worker/checkpoint.h"
#include "worker/tp/transformer_weights.h"

namespace qsync {
namespace {

using test::ScratchDir;
using test::TinyGpt;

std::vector<float> param(const Model& m, const std::string& name) {
  for (const Parameter* p : m.parameters())
    if (p->name == name) return std::vector<float>(p->value.f32(), p->value.f32() + p->value.numel());
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

void expect_same_weights(const TransformerWeights& a, const TransformerWeights& b) {
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.model_hash, b.model_hash);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.mlp_width, b.mlp_width);
  EXPECT_EQ(a.token_embedding, b.token_embedding);
  EXPECT_EQ(a.position_embedding, b.position_embedding);
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    EXPECT_EQ(a.blocks[i].heads, b.blocks[i].heads);
    EXPECT_EQ(a.blocks[i].qkv_weight, b.blocks[i].qkv_weight);
    EXPECT_EQ(a.blocks[i].proj_bias, b.blocks[i].proj_bias);
    EXPECT_EQ(a.blocks[i].fc1_weight, b.blocks[i].fc1_weight);
    EXPECT_EQ(a.blocks[i].fc2_weight, b.blocks[i].fc2_weight);
    EXPECT_EQ(a.blocks[i].ln2_gain, b.blocks[i].ln2_gain);
  }
  EXPECT_EQ(a.lnf_gain, b.lnf_gain);
  EXPECT_EQ(a.head_weight, b.head_weight);
  EXPECT_EQ(a.head_bias, b.head_bias);
}

TEST(TransformerWeights, FromModelCopiesEveryTensor) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  EXPECT_EQ(w.model_name, "tiny-gpt");
  EXPECT_EQ(w.model_hash, g.desc.hash);
  EXPECT_EQ(w.vocab, 96);
  EXPECT_EQ(w.max_tokens, 16);
  EXPECT_EQ(w.width, 32);
  EXPECT_EQ(w.mlp_width, 128);
  ASSERT_EQ(w.blocks.size(), 2u);
  EXPECT_EQ(w.blocks[1].heads, 4);
  EXPECT_EQ(w.token_embedding, param(*g.model, "embed.weight"));
  EXPECT_EQ(w.position_embedding, param(*g.model, "embed.position"));
  EXPECT_EQ(w.blocks[1].qkv_weight, param(*g.model, "blocks.1.attn.qkv.weight"));
  EXPECT_EQ(w.blocks[1].qkv_bias, param(*g.model, "blocks.1.attn.qkv.bias"));
  EXPECT_EQ(w.blocks[0].proj_weight, param(*g.model, "blocks.0.attn.proj.weight"));
  EXPECT_EQ(w.blocks[0].fc1_bias, param(*g.model, "blocks.0.mlp.fc1.bias"));
  EXPECT_EQ(w.blocks[1].fc2_weight, param(*g.model, "blocks.1.mlp.fc2.weight"));
  EXPECT_EQ(w.blocks[1].ln2_gain, param(*g.model, "blocks.1.ln2.weight"));
  EXPECT_EQ(w.lnf_bias, param(*g.model, "ln_f.bias"));
  EXPECT_EQ(w.head_weight, param(*g.model, "head.weight"));
}

TEST(TransformerWeights, RefusesModelsThatAreNotCharGpt) {
  MemoryAccount memory;
  Model mlp(model_desc_find("mlp"), &memory, 1);
  try {
    transformer_weights_from_model(mlp);
    FAIL() << "an image classifier was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a token language model"), std::string::npos) << e.what();
  }
}

TEST(TransformerWeights, LoadsTrainCheckpointsOfEitherOptimizer) {
  ScratchDir dir;
  const std::string model_file = dir.write("tiny.yaml", test::tiny_gpt_yaml());
  for (OptimizerKind kind : {OptimizerKind::ADAMW, OptimizerKind::SGD}) {
    TinyGpt g(kind == OptimizerKind::SGD ? 11 : 12);
    OptimizerConfig oc;
    oc.kind = kind;
    Optimizer opt(oc, g.model->parameters(), &g.memory);
    CheckpointMeta meta;
    meta.step = 3;
    std::filesystem::create_directories(dir.file("ckpt"));
    checkpoint_save(checkpoint_path(dir.file("ckpt")), *g.model, opt, meta);
    const TransformerWeights expected = transformer_weights_from_model(*g.model);
    expect_same_weights(transformer_weights_load(model_file, checkpoint_path(dir.file("ckpt"))), expected);
    expect_same_weights(transformer_weights_load(model_file, dir.file("ckpt")), expected);  // the directory
  }
}

TEST(TransformerWeights, MissingCheckpointIsNamed) {
  ScratchDir dir;
  const std::string model_file = dir.write("tiny.yaml", test::tiny_gpt_yaml());
  try {
    transformer_weights_load(model_file, dir.file("nowhere/latest.qckpt"));
    FAIL() << "a missing checkpoint was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere/latest.qckpt does not exist"), std::string::npos) << e.what();
  }
}

TEST(TransformerWeights, AnotherModelsCheckpointIsRefused) {
  ScratchDir dir;
  const std::string model_file = dir.write("tiny.yaml", test::tiny_gpt_yaml());
  TinyGpt other(3, test::tiny_gpt_yaml("tiny-gpt", 3));  // three blocks: another hash
  Optimizer opt(OptimizerConfig{}, other.model->parameters(), &other.memory);
  checkpoint_save(dir.file("other.qckpt"), *other.model, opt, CheckpointMeta{});
  try {
    transformer_weights_load(model_file, dir.file("other.qckpt"));
    FAIL() << "another model's checkpoint was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to another model"), std::string::npos) << e.what();
  }
}

TEST(TransformerWeights, FileRoundTrip) {
  ScratchDir dir;
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  transformer_weights_save(w, dir.file("w.qtw"));
  const TransformerWeights back = transformer_weights_read(dir.file("w.qtw"));
  expect_same_weights(back, w);
  EXPECT_EQ(back.causal, w.causal);
  for (size_t i = 0; i < w.blocks.size(); ++i) {  // the fields expect_same_weights skips
    EXPECT_EQ(back.blocks[i].ln1_gain, w.blocks[i].ln1_gain);
    EXPECT_EQ(back.blocks[i].ln1_bias, w.blocks[i].ln1_bias);
    EXPECT_EQ(back.blocks[i].qkv_bias, w.blocks[i].qkv_bias);
    EXPECT_EQ(back.blocks[i].proj_weight, w.blocks[i].proj_weight);
    EXPECT_EQ(back.blocks[i].ln2_bias, w.blocks[i].ln2_bias);
    EXPECT_EQ(back.blocks[i].fc1_bias, w.blocks[i].fc1_bias);
    EXPECT_EQ(back.blocks[i].fc2_bias, w.blocks[i].fc2_bias);
  }
  EXPECT_EQ(back.lnf_bias, w.lnf_bias);
}

TEST(TransformerWeights, DamagedFilesAreRefused) {
  ScratchDir dir;
  TinyGpt g;
  transformer_weights_save(transformer_weights_from_model(*g.model), dir.file("w.qtw"));
  const std::string good = file_read_all(dir.file("w.qtw"));
  auto expect_refused = [&](const std::string& bytes, const std::string& phrase) {
    atomic_file_write(dir.file("bad.qtw"), bytes);
    try {
      transformer_weights_read(dir.file("bad.qtw"));
      ADD_FAILURE() << "a damaged file was accepted (expected: " << phrase << ")";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  std::string flipped = good;
  flipped[good.size() / 2] = char(flipped[good.size() / 2] ^ 0x10);
  expect_refused(flipped, "corrupt (checksum mismatch)");
  expect_refused(good.substr(0, good.size() - 100), "corrupt");
  std::string magic = good;
  magic[0] = 'X';
  expect_refused(magic, "not a QSync transformer weights file");
  EXPECT_THROW(transformer_weights_read(dir.file("missing.qtw")), std::runtime_error);
}

TEST(TpLayout, ContiguousSplitsHeadsAndSlices) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  const TpLayout l = tp_layout_contiguous(w, 2);
  EXPECT_EQ(l.ranks, 2);
  ASSERT_EQ(l.heads_of_rank.size(), 2u);
  EXPECT_EQ(l.heads_of_rank[1][0], (std::vector<int>{0, 1}));
  EXPECT_EQ(l.heads_of_rank[1][1], (std::vector<int>{2, 3}));
  EXPECT_EQ(l.mlp_slice_of_rank[0], (std::vector<int>{0, 1}));
  EXPECT_NO_THROW(tp_layout_check(w, l));
  EXPECT_NO_THROW(tp_layout_check(w, tp_layout_contiguous(w, 4)));
  for (int bad : {3, 8, 0}) {
    try {
      tp_layout_contiguous(w, bad);
      ADD_FAILURE() << "TP degree " << bad << " was accepted for 4 heads";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("does not divide") != std::string::npos || msg.find("at least 1") != std::string::npos)
          << msg;
    }
  }
}

TEST(TpLayout, CheckRefusesBrokenLayoutsAndAcceptsPermutations) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  TpLayout permuted = tp_layout_contiguous(w, 2);
  permuted.heads_of_rank[0] = {{3, 0}, {2, 1}};
  permuted.mlp_slice_of_rank[0] = {1, 0};
  EXPECT_NO_THROW(tp_layout_check(w, permuted));
  auto expect_refused = [&](TpLayout l, const std::string& phrase) {
    try {
      tp_layout_check(w, l);
      ADD_FAILURE() << "a broken layout was accepted (expected: " << phrase << ")";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  TpLayout twice = permuted;
  twice.heads_of_rank[1] = {{0, 1}, {1, 2}};
  expect_refused(twice, "head 1 is owned by ranks 0 and 1");
  TpLayout uneven = permuted;
  uneven.heads_of_rank[1] = {{0, 1, 2}, {3}};
  expect_refused(uneven, "an even split");
  TpLayout slices = permuted;
  slices.mlp_slice_of_rank[1] = {0, 0};
  expect_refused(slices, "MLP slice 0 is owned by ranks 0 and 1");
  TpLayout short_layout = permuted;
  short_layout.heads_of_rank.pop_back();
  expect_refused(short_layout, "the model has 2");
  TpLayout out_of_range = permuted;
  out_of_range.heads_of_rank[0][1][0] = 4;
  expect_refused(out_of_range, "head 4 is outside 0..3");
}

}  // namespace
}  // namespace qsync
