// File: tests/planner/model_desc_test.cpp
// Tests of planner/model_desc.h: every zoo model parses; the MLP's and CNN's shapes, parameter
// counts and GEMM dims against hand calculations; the ViT and char-GPT totals; the
// transformer_block expansion; the model hash; the zoo lookup; and one test per error case.
#include "planner/model_desc.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <functional>

#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

using qsync::testing::expect_error;

const LayerDesc* find_layer(const LayerDesc& l, const std::string& name) {
  if (l.name == name) return &l;
  for (const LayerDesc& c : l.children)
    if (const LayerDesc* hit = find_layer(c, name)) return hit;
  return nullptr;
}
const LayerDesc& layer(const ModelDesc& m, const std::string& name) {
  const LayerDesc* l = find_layer(m.root, name);
  if (!l) throw std::runtime_error("no layer '" + name + "' in " + m.name);
  return *l;
}
std::vector<std::string> names(const std::vector<const LayerDesc*>& layers) {
  std::vector<std::string> out;
  for (const LayerDesc* l : layers) out.push_back(l->name);
  return out;
}

std::string image_model(const std::string& layers, int classes = 10) {
  return "name: test-model\ntask: classification\ninput: {kind: image, shape: [1, 28, 28]}\nclasses: " +
         std::to_string(classes) + "\nlayers:\n" + layers;
}
std::string token_model(const std::string& layers) {
  return "name: test-lm\ntask: language_model\ninput: {kind: tokens, seq_len: 16, vocab: 32}\nlayers:\n" + layers;
}
ModelDesc parse(const std::string& text) { return model_desc_parse(text, "test.yaml"); }

TEST(ModelZoo, EveryModelParses) {
  std::vector<std::string> zoo = model_zoo_names();
  for (const char* expected : {"char-gpt", "cnn", "mlp", "vit"})
    EXPECT_NE(std::find(zoo.begin(), zoo.end(), expected), zoo.end()) << expected << " missing from " << model_zoo_dir();
  for (const std::string& name : zoo) {
    SCOPED_TRACE(name);
    ModelDesc m = model_desc_find(name);
    EXPECT_FALSE(m.name.empty());
    EXPECT_NE(m.hash, 0u);
    EXPECT_FALSE(model_gemm_layers(m).empty());
    EXPECT_EQ(m.source, model_zoo_dir() + "/" + name + ".yaml");
  }
}

TEST(ModelZoo, MlpShapesParametersAndGemmDims) {
  ModelDesc m = model_desc_find("mlp");
  EXPECT_EQ(m.name, "mlp-fmnist");
  EXPECT_EQ(m.input_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(layer(m, "flatten").out_shape, (Shape{784}));
  const LayerDesc& fc1 = layer(m, "fc1");
  EXPECT_EQ(fc1.in_shape, (Shape{784}));
  EXPECT_EQ(fc1.out_shape, (Shape{1024}));
  EXPECT_EQ(fc1.parameter_count, 784 * 1024 + 1024);
  EXPECT_EQ(fc1.gemm_rows, 1);
  EXPECT_EQ(fc1.gemm_k, 784);
  EXPECT_EQ(fc1.gemm_n, 1024);
  EXPECT_EQ(layer(m, "fc2").parameter_count, 1024 * 1024 + 1024);
  EXPECT_EQ(layer(m, "fc3").parameter_count, 1024 * 10 + 10);
  EXPECT_EQ(layer(m, "fc3").out_shape, (Shape{10}));
  EXPECT_EQ(model_parameter_count(m), 1863690);
  EXPECT_EQ(names(model_gemm_layers(m)), (std::vector<std::string>{"fc1", "fc2", "fc3"}));
  EXPECT_EQ(names(model_leaf_layers(m)),
            (std::vector<std::string>{"flatten", "fc1", "relu1", "fc2", "relu2", "fc3"}));
}

TEST(ModelZoo, CnnShapesParametersAndGemmDims) {
  ModelDesc m = model_desc_find("cnn");
  struct Expect {
    const char* name;
    Shape out;
    int64_t params, rows, k, n;
  };
  const Expect expected[] = {
      {"conv1", {32, 28, 28}, 32 * 1 * 9 + 32, 784, 9, 32},
      {"relu1", {32, 28, 28}, 0, 0, 0, 0},
      {"conv2", {32, 28, 28}, 32 * 32 * 9 + 32, 784, 288, 32},
      {"pool1", {32, 14, 14}, 0, 0, 0, 0},
      {"conv3", {64, 14, 14}, 64 * 32 * 9 + 64, 196, 288, 64},
      {"conv4", {64, 14, 14}, 64 * 64 * 9 + 64, 196, 576, 64},
      {"pool2", {64, 7, 7}, 0, 0, 0, 0},
      {"flatten", {3136}, 0, 0, 0, 0},
      {"fc1", {256}, 3136 * 256 + 256, 1, 3136, 256},
      {"fc2", {10}, 256 * 10 + 10, 1, 256, 10},
  };
  for (const Expect& e : expected) {
    SCOPED_TRACE(e.name);
    const LayerDesc& l = layer(m, e.name);
    EXPECT_EQ(l.out_shape, e.out);
    EXPECT_EQ(l.parameter_count, e.params);
    EXPECT_EQ(l.gemm_rows, e.rows);
    EXPECT_EQ(l.gemm_k, e.k);
    EXPECT_EQ(l.gemm_n, e.n);
  }
  EXPECT_EQ(model_parameter_count(m), 870634);
  EXPECT_EQ(names(model_gemm_layers(m)),
            (std::vector<std::string>{"conv1", "conv2", "conv3", "conv4", "fc1", "fc2"}));
  EXPECT_EQ(m.root.out_shape, (Shape{10}));
}

TEST(ModelZoo, VitAndCharGptTotals) {
  ModelDesc vit = model_desc_find("vit");
  EXPECT_EQ(layer(vit, "patch_embed").out_shape, (Shape{64, 4, 4}));
  EXPECT_EQ(layer(vit, "patch_embed").gemm_rows, 16);
  EXPECT_EQ(layer(vit, "patch_embed").gemm_k, 49);
  EXPECT_EQ(layer(vit, "to_tokens").out_shape, (Shape{16, 64}));
  EXPECT_EQ(layer(vit, "pos_embed").parameter_count, 16 * 64);
  const LayerDesc& qkv = layer(vit, "blocks.2.attn.qkv");
  EXPECT_EQ(qkv.out_shape, (Shape{16, 192}));
  EXPECT_EQ(qkv.gemm_rows, 16);
  EXPECT_EQ(qkv.gemm_k, 64);
  EXPECT_EQ(qkv.gemm_n, 192);
  EXPECT_EQ(layer(vit, "blocks.2.mlp.fc1").gemm_n, 128);
  EXPECT_EQ(layer(vit, "pool").out_shape, (Shape{64}));
  EXPECT_EQ(model_gemm_layers(vit).size(), 1u + 4 * 4 + 1);
  EXPECT_EQ(model_parameter_count(vit), 138890);

  ModelDesc gpt = model_desc_find("char-gpt");
  EXPECT_EQ(gpt.task, ModelTask::LANGUAGE_MODEL);
  EXPECT_EQ(gpt.input_kind, InputKind::TOKENS);
  EXPECT_EQ(gpt.vocab, 96);
  EXPECT_EQ(layer(gpt, "embed").out_shape, (Shape{64, 128}));
  EXPECT_EQ(layer(gpt, "embed").parameter_count, 96 * 128 + 64 * 128);
  EXPECT_TRUE(layer(gpt, "blocks.3.attn").causal);
  EXPECT_EQ(layer(gpt, "blocks.0.mlp.fc1").out_shape, (Shape{64, 512}));
  EXPECT_EQ(gpt.root.out_shape, (Shape{64, 96}));
  EXPECT_EQ(model_parameter_count(gpt), 826208);
}

TEST(ModelDesc, TransformerBlockExpansion) {
  ModelDesc m = parse(token_model(
      "  - {name: emb, type: embedding, dim: 32}\n"
      "  - {name: b, type: transformer_block, heads: 4, mlp_ratio: 3, causal: true, dropout: 0.1}\n"
      "  - {name: head, type: linear, out: 32}\n"));
  std::vector<std::string> tree;
  std::function<void(const LayerDesc&)> visit = [&](const LayerDesc& l) {
    tree.push_back(l.name + ":" + layer_kind_name(l.kind));
    for (const LayerDesc& c : l.children) visit(c);
  };
  visit(layer(m, "b"));
  EXPECT_EQ(tree, (std::vector<std::string>{
                      "b:sequential", "b.attn_res:residual", "b.ln1:layernorm", "b.attn:attention",
                      "b.attn.qkv:linear", "b.attn.proj:linear", "b.attn_drop:dropout", "b.mlp_res:residual",
                      "b.ln2:layernorm", "b.mlp.fc1:linear", "b.mlp.gelu:gelu", "b.mlp.fc2:linear",
                      "b.mlp_drop:dropout"}));
  EXPECT_EQ(layer(m, "b.attn").heads, 4);
  EXPECT_TRUE(layer(m, "b.attn").causal);
  EXPECT_EQ(layer(m, "b.attn").parameter_count, 0);
  EXPECT_EQ(layer(m, "b.attn.qkv").out_shape, (Shape{16, 96}));
  EXPECT_EQ(layer(m, "b.attn.proj").out_shape, (Shape{16, 32}));
  EXPECT_EQ(layer(m, "b.mlp.fc1").out_shape, (Shape{16, 96}));
  EXPECT_EQ(layer(m, "b.mlp.fc2").out_shape, (Shape{16, 32}));
  EXPECT_DOUBLE_EQ(layer(m, "b.mlp_drop").p, 0.1);
  EXPECT_EQ(names(model_gemm_layers(m)),
            (std::vector<std::string>{"b.attn.qkv", "b.attn.proj", "b.mlp.fc1", "b.mlp.fc2", "head"}));
  EXPECT_EQ(names(model_leaf_layers(m)),
            (std::vector<std::string>{"emb", "b.ln1", "b.attn", "b.attn_drop", "b.ln2", "b.mlp.fc1", "b.mlp.gelu",
                                      "b.mlp.fc2", "b.mlp_drop", "head"}));

  // Without dropout there are no dropout layers.
  ModelDesc plain = parse(token_model(
      "  - {name: emb, type: embedding, dim: 32}\n"
      "  - {name: b, type: transformer_block, heads: 4}\n"
      "  - {name: head, type: linear, out: 32}\n"));
  EXPECT_EQ(find_layer(plain.root, "b.attn_drop"), nullptr);
  EXPECT_EQ(layer(plain, "b.mlp.fc1").out_shape, (Shape{16, 128}));  // mlp_ratio defaults to 4
}

TEST(ModelDesc, OtherLayerShapes) {
  ModelDesc m = parse(image_model(
      "  - {name: c, type: conv2d, out_channels: 8, kernel: 5, stride: 2, bias: false}\n"  // (8, 12, 12)
      "  - {name: p, type: maxpool2d, kernel: 3, stride: 2}\n"                              // (8, 5, 5)
      "  - {name: t, type: to_tokens}\n"                                                    // (25, 8)
      "  - {name: r, type: residual, layers: [{name: ln, type: layernorm}, {name: f, type: linear, out: 8}]}\n"
      "  - {name: a, type: attention, heads: 2}\n"
      "  - {name: g, type: global_avg_pool}\n"
      "  - {name: fc, type: linear, out: 10}\n"));
  EXPECT_EQ(layer(m, "c").out_shape, (Shape{8, 12, 12}));
  EXPECT_EQ(layer(m, "c").parameter_count, 8 * 25);
  EXPECT_EQ(layer(m, "p").out_shape, (Shape{8, 5, 5}));
  EXPECT_EQ(layer(m, "t").out_shape, (Shape{25, 8}));
  EXPECT_EQ(layer(m, "f").gemm_rows, 25);
  EXPECT_EQ(layer(m, "r").out_shape, (Shape{25, 8}));
  EXPECT_EQ(layer(m, "g").out_shape, (Shape{8}));
}

TEST(ModelDesc, HashIsStableAndSeesEveryChange) {
  std::string base = image_model(
      "  - {name: conv, type: conv2d, out_channels: 4, kernel: 3, padding: 1}\n"
      "  - {name: flat, type: flatten}\n"
      "  - {name: fc, type: linear, out: 10}\n");
  uint64_t h = parse(base).hash;
  EXPECT_EQ(parse(base).hash, h);
  EXPECT_EQ(model_desc_parse("# a comment\n" + base, "elsewhere.yaml").hash, h);  // text, not architecture
  EXPECT_EQ(model_hash_string(h).size(), 16u);

  auto variant = [&](const std::string& from, const std::string& to) {
    std::string text = base;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return parse(text.replace(at, from.size(), to)).hash;
  };
  std::vector<uint64_t> hashes = {h,
                                  variant("out_channels: 4", "out_channels: 5"),
                                  variant("padding: 1", "padding: 1, stride: 1, bias: false"),
                                  variant("kernel: 3, padding: 1", "kernel: 5, padding: 2"),
                                  variant("name: fc,", "name: fc_out,"),
                                  variant("shape: [1, 28, 28]", "shape: [3, 28, 28]"),
                                  variant("- {name: flat, type: flatten}", "- {name: flat, type: flatten}\n"
                                                                           "  - {name: d, type: dropout, p: 0.5}")};
  std::sort(hashes.begin(), hashes.end());
  EXPECT_EQ(std::unique(hashes.begin(), hashes.end()), hashes.end()) << "two different models share a hash";

  std::string lm = token_model(
      "  - {name: emb, type: embedding, dim: 32}\n"
      "  - {name: b, type: transformer_block, heads: 4}\n"
      "  - {name: head, type: linear, out: 32}\n");
  uint64_t lm_hash = parse(lm).hash;
  std::string causal = lm;
  causal.replace(causal.find("heads: 4"), 8, "heads: 4, causal: true");
  std::string heads = lm;
  heads.replace(heads.find("heads: 4"), 8, "heads: 8");
  EXPECT_NE(parse(causal).hash, lm_hash);
  EXPECT_NE(parse(heads).hash, lm_hash);
  EXPECT_NE(parse(causal).hash, parse(heads).hash);
}

TEST(ModelDesc, ShapeHelpersAndKindNames) {
  EXPECT_EQ(shape_string({32, 14, 14}), "(32, 14, 14)");
  EXPECT_EQ(shape_string({10}), "(10)");
  EXPECT_EQ(shape_numel({32, 14, 14}), 32 * 14 * 14);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_STREQ(layer_kind_name(LayerKind::CONV2D), "conv2d");
  EXPECT_STREQ(layer_kind_name(LayerKind::GLOBAL_AVG_POOL), "global_avg_pool");
  EXPECT_STREQ(layer_kind_name(LayerKind::SEQUENTIAL), "sequential");
  EXPECT_EQ(model_hash_string(0xabcull), "0000000000000abc");
}

struct ErrorCase {
  const char* what;
  std::string yaml;
  std::vector<std::string> pieces;
};

TEST(ModelDesc, ErrorsNameTheFileTheLayerAndTheFix) {
  const std::string flat_fc = "  - {name: flat, type: flatten}\n  - {name: fc, type: linear, out: 10}\n";
  const std::vector<ErrorCase> cases = {
      {"missing attribute", image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear}\n"),
       {"test.yaml: layer 'fc' (linear): missing attribute 'out' (the number of output features)"}},
      {"malformed YAML", "name: x\nlayers: [\n  {name: a, type: relu\n",
       {"test.yaml: malformed YAML at line ", ", column ", "fix the syntax"}},
      {"duplicate name", image_model("  - {name: fc, type: flatten}\n  - {name: fc, type: linear, out: 10}\n"),
       {"test.yaml: layer 'fc' (linear): duplicate layer name 'fc' (also used by layers[0])", "rename one"}},
      {"unknown type", image_model("  - {name: c, type: conv, out_channels: 4}\n" + flat_fc),
       {"test.yaml: layer 'c': unknown type 'conv'", "known types: linear, conv2d, relu", "transformer_block"}},
      {"unknown attribute", image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear, outs: 10}\n"),
       {"layer 'fc' (linear): unknown attribute 'outs' (did you mean 'out'?)", "linear takes: name, type, out, bias"}},
      {"unnamed layer", image_model("  - {name: flat, type: flatten}\n  - {type: linear, out: 10}\n"),
       {"test.yaml: layers[1] (linear): missing attribute 'name'"}},
      {"missing type", image_model("  - {name: flat}\n" + flat_fc), {"layer 'flat': missing attribute 'type'"}},
      {"bad name", image_model("  - {name: 'my layer', type: flatten}\n  - {name: fc, type: linear, out: 10}\n"),
       {"layer name 'my layer' may use only"}},
      {"not an integer", image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear, out: ten}\n"),
       {"layer 'fc' (linear): attribute 'out' must be an integer", "got 'ten'"}},
      {"not positive", image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear, out: 0}\n"),
       {"attribute 'out' must be an integer from 1 up, got 0"}},
      {"bad bool", image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear, out: 10, bias: maybe}\n"),
       {"attribute 'bias' must be true or false, got 'maybe'"}},
      {"bad probability", image_model("  - {name: d, type: dropout, p: 1.5}\n" + flat_fc),
       {"layer 'd' (dropout): attribute 'p' must be a probability in [0, 1)"}},
      {"conv after flatten", image_model("  - {name: flat, type: flatten}\n"
                                         "  - {name: c, type: conv2d, out_channels: 4, kernel: 3}\n"),
       {"layer 'c' (conv2d): conv2d needs a (C, H, W) input, got (784)", "move it before flatten"}},
      {"kernel too large", image_model("  - {name: c, type: conv2d, out_channels: 4, kernel: 29}\n" + flat_fc),
       {"layer 'c' (conv2d): kernel 29 is larger than the padded input height 28"}},
      {"heads do not divide", token_model("  - {name: e, type: embedding, dim: 30}\n"
                                          "  - {name: blocks.0, type: transformer_block, heads: 4}\n"
                                          "  - {name: head, type: linear, out: 32}\n"),
       {"layer 'blocks.0' (transformer_block): heads 4 does not divide the width 30"}},
      {"residual changes shape", image_model("  - {name: flat, type: flatten}\n"
                                             "  - {name: r, type: residual, layers: [{name: f, type: linear, out: 7}]}\n"
                                             "  - {name: fc, type: linear, out: 10}\n"),
       {"layer 'r' (residual): the residual body maps (784) to (7)"}},
      {"empty residual", image_model("  - {name: r, type: residual, layers: []}\n" + flat_fc),
       {"layer 'r' layers: must be a non-empty list of layers"}},
      {"wrong output width", image_model(flat_fc, 7),
       {"test.yaml: the model outputs (10) per sample but a classification model must output (7)"}},
      {"tokens without embedding", token_model("  - {name: head, type: linear, out: 32}\n"),
       {"layer 'head' (linear): its input is the model's token ids (16)", "must start with an embedding"}},
      {"embedding on an image", image_model("  - {name: e, type: embedding, dim: 8}\n" + flat_fc),
       {"layer 'e' (embedding): an embedding takes the model's token ids"}},
      {"language model on images", "name: x\ntask: language_model\ninput: {kind: image, shape: [1, 4, 4]}\n"
                                   "layers:\n" + flat_fc,
       {"task language_model needs a tokens input"}},
      {"language model output", token_model("  - {name: e, type: embedding, dim: 8}\n"
                                            "  - {name: head, type: linear, out: 31}\n"),
       {"a language model must output (16, 32) (seq_len, vocab)", "out: 32"}},
      {"unknown top-level key", image_model(flat_fc) + "layer: []\n",
       {"test.yaml: unknown key 'layer' (did you mean 'layers'?)"}},
      {"missing classes", "name: x\ntask: classification\ninput: {kind: image, shape: [1, 4, 4]}\nlayers:\n" + flat_fc,
       {"missing 'classes'"}},
      {"bad input kind", "name: x\ntask: classification\ninput: {kind: audio}\nclasses: 2\nlayers:\n" + flat_fc,
       {"input: unknown kind 'audio'; use image or tokens"}},
      {"generated name clash", token_model("  - {name: e, type: embedding, dim: 8}\n"
                                           "  - {name: b.ln1, type: layernorm}\n"
                                           "  - {name: b, type: transformer_block, heads: 2}\n"
                                           "  - {name: head, type: linear, out: 32}\n"),
       {"layer 'b' (transformer_block): the generated layer name 'b.ln1' is already used by layers[1]"}},
      {"not a mapping", "- just\n- a list\n", {"test.yaml: a model file must be a YAML mapping"}},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    expect_error<std::invalid_argument>([&] { parse(c.yaml); }, c.pieces);
  }
}

TEST(ModelDesc, FindLooksUpPathsThenTheZoo) {
  qsync::testing::ScratchDir dir;
  std::string custom = dir.file("custom.yaml");
  std::ofstream(custom) << image_model("  - {name: flat, type: flatten}\n  - {name: fc, type: linear, out: 10}\n");
  EXPECT_EQ(model_desc_find(custom).name, "test-model");
  EXPECT_EQ(model_desc_load(custom).source, custom);

  expect_error<std::invalid_argument>([] { model_desc_find("resnet-9000"); },
                                      {"unknown model 'resnet-9000'", "cnn, gpt-768, mlp", "QSYNC_MODEL_ZOO"});
  expect_error<std::invalid_argument>([&] { model_desc_find(dir.file("gone.yaml")); },
                                      {"model file '" + dir.file("gone.yaml") + "' does not exist"});
  expect_error<std::invalid_argument>([&] { model_desc_load(dir.file("gone.yaml")); },
                                      {dir.file("gone.yaml"), "No such file or directory"});

  ::setenv("QSYNC_MODEL_ZOO", dir.path().c_str(), 1);
  EXPECT_EQ(model_zoo_dir(), dir.path().string());
  EXPECT_EQ(model_zoo_names(), (std::vector<std::string>{"custom"}));
  EXPECT_EQ(model_desc_find("custom").name, "test-model");
  expect_error<std::invalid_argument>([] { model_desc_find("cnn"); }, {"models there: custom"});
  ::unsetenv("QSYNC_MODEL_ZOO");
  EXPECT_EQ(model_desc_find("cnn").name, "cnn-fmnist");
}

}  // namespace
}  // namespace qsync

// Found by the onnx_model fuzz target: an ONNX Reshape to (4294967295, 7696581459970) overflowed
// the element count (signed overflow); an overflowing shape is refused, naming the shape.
TEST(ShapeNumel, AnOverflowingShapeIsRefusedNamingIt) {
  EXPECT_EQ(qsync::shape_numel({2, 3, 4}), 24);
  try {
    (void)qsync::shape_numel({4294967295, 7696581459970});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(4294967295, 7696581459970)"), std::string::npos) << e.what();
  }
}
