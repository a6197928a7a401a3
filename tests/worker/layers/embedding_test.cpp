// Unit tests for worker/layers/embedding: token + position embeddings and the positional layer.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/gradient_check.h"
#include "tests/worker/layers/layer_test_support.h"
#include "worker/layers/embedding.h"

namespace qsync::testing {
namespace {

LayerDesc embedding_desc(int64_t T, int64_t dim, int64_t vocab) {
  LayerDesc d = make_desc("embed", LayerKind::EMBEDDING, {T});
  d.out = dim;
  d.vocab = vocab;
  return d;
}

Tensor random_ids(const Shape& shape, int64_t vocab, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, Precision::FP32, nullptr);
  std::uniform_int_distribution<int64_t> u(0, vocab - 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(u(rng));
  return t;
}

TEST(EmbeddingLayer, ForwardAddsTokenAndPosition) {
  EmbeddingLayer embed(embedding_desc(3, 4, 10), nullptr);
  EXPECT_EQ(embed.desc().out_shape, (Shape{3, 4}));
  std::mt19937_64 rng(12);
  embed.init_parameters(rng);
  std::vector<Parameter*> params;
  embed.collect_parameters(params);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "embed.weight");
  EXPECT_EQ(params[0]->value.shape(), (Shape{10, 4}));
  EXPECT_EQ(params[1]->name, "embed.position");
  EXPECT_EQ(params[1]->value.shape(), (Shape{3, 4}));
  const float* wte = params[0]->value.f32();
  const float* wpe = params[1]->value.f32();
  StepContext ctx;
  Tensor ids = tensor_from({2, 3}, {7, 0, 9, 3, 3, 1});
  Tensor y = embed.forward(ids, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t id = int64_t(ids.f32()[i]), t = i % 3;
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(y.f32()[i * 4 + c], wte[id * 4 + c] + wpe[t * 4 + c]);
  }
}

TEST(EmbeddingLayer, BackwardAccumulatesAndReturnsZeroDx) {
  EmbeddingLayer embed(embedding_desc(2, 3, 5), nullptr);
  StepContext ctx;
  embed.forward(tensor_from({2, 2}, {4, 4, 1, 4}), ctx);  // id 4 three times
  Tensor dy = tensor_from({2, 2, 3}, {1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000});
  Tensor dx = embed.backward(dy, ctx);
  EXPECT_EQ(dx.shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(dx), (std::vector<float>{0, 0, 0, 0}));
  std::vector<Parameter*> params;
  embed.collect_parameters(params);
  const float* dwte = params[0]->grad.f32();
  EXPECT_EQ((std::vector<float>(dwte + 4 * 3, dwte + 5 * 3)), (std::vector<float>{1011, 2022, 3033}));
  EXPECT_EQ((std::vector<float>(dwte + 1 * 3, dwte + 2 * 3)), (std::vector<float>{100, 200, 300}));
  EXPECT_EQ(dwte[0], 0.0f);
  EXPECT_EQ(values_of(params[1]->grad), (std::vector<float>{101, 202, 303, 1010, 2020, 3030}));
}

TEST(EmbeddingLayer, GradientCheckOfBothTables) {
  std::mt19937_64 rng(13);
  EmbeddingLayer embed(embedding_desc(4, 5, 7), nullptr);
  embed.init_parameters(rng);
  GradientCheckOptions opt;
  opt.check_input = false;  // ids have no gradient (and a perturbed id is not an id)
  GradientCheckResult r = gradient_check(embed, random_ids({3, 4}, 7, rng), opt);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.tensors.size(), 2u);
}

TEST(EmbeddingLayer, OutOfRangeIdsThrow) {
  EmbeddingLayer embed(embedding_desc(3, 2, 10), nullptr);
  StepContext ctx;
  for (float bad : {10.0f, -1.0f, 2.5f, NAN}) {
    Tensor ids = tensor_from({1, 3}, {0, bad, 1});
    try {
      embed.forward(ids, ctx);
      FAIL() << "id " << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("embed"), std::string::npos) << msg;
      EXPECT_NE(msg.find("position 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
  }
}

TEST(EmbeddingLayer, VocabularyFromDescription) {
  EXPECT_THROW(EmbeddingLayer(embedding_desc(3, 2, 0), nullptr), std::invalid_argument);
  // A description without vocab but with the resolved parameter count (vocab * dim + T * dim).
  LayerDesc d = embedding_desc(3, 2, 0);
  d.parameter_count = 96 * 2 + 3 * 2;
  EmbeddingLayer embed(d, nullptr);
  std::vector<Parameter*> params;
  embed.collect_parameters(params);
  EXPECT_EQ(params[0]->value.shape(), (Shape{96, 2}));
}

TEST(EmbeddingLayer, InitIsGpt2Normal) {
  EmbeddingLayer embed(embedding_desc(64, 32, 200), nullptr);
  std::mt19937_64 rng(14);
  embed.init_parameters(rng);
  std::vector<Parameter*> params;
  embed.collect_parameters(params);
  // n = 6400 draws of N(0, 0.02^2): the sample mean has sd 0.02 / 80 = 2.5e-4 (bound: 5 sd),
  // the sample sd has sd ~ 0.02 / sqrt(2n) = 1.8e-4 (bound: 5 sd, rounded up to 1e-3).
  const Tensor& w = params[0]->value;
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    sum += w.f32()[i];
    sum2 += double(w.f32()[i]) * w.f32()[i];
  }
  const double mean = sum / double(w.numel());
  EXPECT_NEAR(mean, 0.0, 1.25e-3);
  EXPECT_NEAR(std::sqrt(sum2 / double(w.numel()) - mean * mean), 0.02, 1e-3);
  // The same rng seed gives the same tables.
  EmbeddingLayer again(embedding_desc(64, 32, 200), nullptr);
  std::mt19937_64 rng2(14);
  again.init_parameters(rng2);
  std::vector<Parameter*> params2;
  again.collect_parameters(params2);
  EXPECT_EQ(values_of(params[1]->value), values_of(params2[1]->value));
}

TEST(EmbeddingLayer, SavedBytesChargedAndReleased) {
  std::mt19937_64 rng(15);
  MemoryAccount params;
  EmbeddingLayer embed(embedding_desc(6, 4, 9), &params);
  EXPECT_EQ(params.current_bytes(), 2 * (9 * 4 + 6 * 4) * 4);
  EXPECT_EQ(check_step_memory(embed, random_ids({2, 6}, 9, rng)), 2 * 6 * 4);  // int32 ids
}

TEST(PositionalLayer, AddsLearnedPositions) {
  PositionalLayer pos(make_desc("pos", LayerKind::POSITIONAL, {3, 2}), nullptr);
  EXPECT_EQ(pos.desc().out_shape, (Shape{3, 2}));
  std::vector<Parameter*> params;
  pos.collect_parameters(params);
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0]->name, "pos.weight");
  for (int i = 0; i < 6; ++i) params[0]->value.f32()[i] = float(i);
  StepContext ctx;
  Tensor y = pos.forward(tensor_from({2, 3, 2}, {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}), ctx);
  EXPECT_EQ(values_of(y), (std::vector<float>{1, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 7}));
  Tensor dy = tensor_from({2, 3, 2}, {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60});
  Tensor dx = pos.backward(dy, ctx);
  EXPECT_EQ(values_of(dx), values_of(dy));
  EXPECT_EQ(values_of(params[0]->grad), (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(PositionalLayer, GradientCheckAndMemory) {
  std::mt19937_64 rng(16);
  PositionalLayer pos(make_desc("pos", LayerKind::POSITIONAL, {5, 3}), nullptr);
  pos.init_parameters(rng);
  Tensor x = random_tensor({2, 5, 3}, rng);
  GradientCheckResult r = gradient_check(pos, x);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(check_step_memory(pos, x), 0);
  EXPECT_THROW(PositionalLayer(make_desc("pos", LayerKind::POSITIONAL, {5}), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::testing
