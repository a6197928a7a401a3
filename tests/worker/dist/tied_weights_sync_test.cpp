// File: tests/worker/dist/tied_weights_sync_test.cpp
// Tied weights under data parallelism: two Gloo ranks (forked processes) train a GPT-style graph
// whose output MatMul reads the token embedding transposed (one parameter, two uses) through
// RankStep with the host gradient sync, each on half of a global batch of 4 sequences, 3 SGD
// steps. The tied parameter must be summed across ranks only once both uses added their gradient
// (the Gather's backward, the later one, reports it ready): the ranks' weights then equal one
// process's on the whole batch to float rounding. A bucket launched at the head's backward would
// miss the Gather's share: the test then fails (measured 7.2e-2 apart, bound 1e-5).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/device_class.h"
#include "planner/model_onnx.h"
#include "tests/support/onnx_writer.h"
#include "tests/worker/dist/forked_ranks.h"
#include "worker/dist/gradient_sync.h"
#include "worker/train_step.h"

namespace qsync {
namespace {

namespace w = qsync::onnx_writer;
using test::expect;

constexpr int64_t V = 7, D = 4, T = 3, GLOBAL = 4, STEPS = 3;

// ids (B, T) -> Gather(wte) -> Tanh -> MatMul(Transpose(wte)) -> logits (B, T, V)
ModelDesc tied_gpt() {
  std::vector<float> table(size_t(V * D));
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.5f * std::sin(float(i) * 1.3f + 0.4f);
  w::GraphSpec g;
  g.inputs = {w::value_info("ids", 7, {-1, T})};
  g.outputs = {w::value_info("logits", 1, {-1, T, V})};
  g.initializers = {w::tensor("wte", {V, D}, table)};
  g.nodes = {w::node("Gather", "/wte/Gather", {"wte", "ids"}, {"e"}), w::node("Tanh", "/act/Tanh", {"e"}, {"h"}),
             w::node("Transpose", "/head/Transpose", {"wte"}, {"wt"}, {w::attr_ints("perm", {1, 0})}),
             w::node("MatMul", "/head/MatMul", {"h", "wt"}, {"logits"})};
  return model_desc_from_onnx(w::model(g), "tied.onnx");
}

// STEPS SGD steps of `model` on sequences [first, first + count) of each step's global batch.
std::vector<float> train(Model& model, GradientSync* sync, int64_t first, int64_t count) {
  OptimizerConfig oc;
  oc.kind = OptimizerKind::SGD;
  oc.lr = 0.5;
  oc.momentum = 0;
  oc.schedule = LrSchedule::CONSTANT;
  Optimizer opt(oc, model.parameters(), nullptr);
  LossScaler scaler;
  RankStep step(model, opt, sync, scaler, {count, T}, count * T, nullptr);
  StepContext ctx;
  ctx.training = true;
  ctx.backward_listener = sync;
  for (int64_t s = 0; s < STEPS; ++s) {
    std::mt19937_64 rng(uint64_t(40 + s));
    std::vector<float> ids(size_t(GLOBAL * T));
    std::vector<int32_t> targets(size_t(GLOBAL * T));
    for (float& id : ids) id = float(rng() % V);
    for (int32_t& t : targets) t = int32_t(rng() % V);
    std::copy(ids.begin() + first * T, ids.begin() + (first + count) * T, step.host_batch().f32());
    step.host_targets().assign(targets.begin() + first * T, targets.begin() + (first + count) * T);
    ctx.step = s;
    step.run(ctx, float(GLOBAL * T));
  }
  const Parameter& p = *model.parameters().at(0);
  return std::vector<float>(p.value.f32(), p.value.f32() + p.value.numel());
}

void rank_body(int rank, Collectives& coll) {
  device_class_activate(device_class_fallback(device_class_by_name("cpu-avx2")), 1);
  const ModelDesc desc = tied_gpt();
  Model dp(desc, nullptr, 1);
  expect(dp.parameters().size() == 1, "the table is one parameter");
  HostGradientSync sync(coll, dp, DEFAULT_BUCKET_BYTES);
  const std::vector<float> mine = train(dp, &sync, rank * GLOBAL / 2, GLOBAL / 2);
  Model single(desc, nullptr, 1);
  const std::vector<float> want = train(single, nullptr, 0, GLOBAL);
  Model start(desc, nullptr, 1);
  const float* initial = start.parameters()[0]->value.f32();
  double worst = 0, moved = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(mine[i]) - want[i]));
    moved = std::max(moved, std::fabs(double(want[i]) - initial[i]));
  }
  expect(moved > 1e-2, "training moved the table by " + std::to_string(moved));
  // SGD, FP32 both ways, sums in another order: rounding, about 1e-7.
  expect(worst < 1e-5, "data parallel vs one process: " + std::to_string(worst));
}

TEST(TiedWeightsSync, TwoRanksTrainTheTiedTableAsOneProcessOnTheGlobalBatch) {
  test::expect_all_succeeded(test::run_ranks(2, std::chrono::milliseconds(20000),
                                             [](int rank, Rendezvous&, Collectives& coll) { rank_body(rank, coll); },
                                             std::chrono::milliseconds(60000)));
}

}  // namespace
}  // namespace qsync
