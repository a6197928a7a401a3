// File: tests/worker/dist/running_stats_sync_test.cpp
// BatchNorm's running statistics under data parallelism: two Gloo ranks (forked processes) train
// the ONNX ResNet-18 golden model (tests/golden/onnx/resnet18.onnx, 20 BatchNorm layers) through
// RankStep with the host gradient sync, each on its half of a global batch of 8. After step 1 the
// first layer's statistics (the only layer whose input does not depend on per-rank normalization)
// are one process's on the whole batch, which each rank's half alone is not; after three steps both
// ranks hold the same statistics bit for bit; and one more synchronized update of every layer is
// the pooled statistics of the two ranks' batches (Chan's parallel variance, computed here).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_class.h"
#include "tests/worker/dist/forked_ranks.h"
#include "worker/dist/gradient_sync.h"
#include "worker/dist/running_stats_sync.h"
#include "worker/train_step.h"

namespace qsync {
namespace {

using test::expect;

constexpr int64_t GLOBAL_BATCH = 8, STEPS = 3;

ModelDesc resnet() {
  std::string path = QSYNC_ONNX_GOLDEN_DIR;  // (appended: GCC 12 warns falsely on a temporary's operator+)
  path += "/resnet18.onnx";
  return model_desc_find(path);
}

// Every running-statistics value of the model, concatenated.
std::vector<float> statistics_of(const Model& m) {
  std::vector<float> out;
  for (RunningStatistics* r : m.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers()) out.insert(out.end(), b.values->begin(), b.values->end());
  return out;
}

// A model's training through RankStep on rows [first, first + count) of each step's global batch
// (normal images, targets 0..9 from the step's seed); `sync` and `coll` null for one process.
struct Training {
  Model& model;
  int64_t first, count;
  Optimizer opt{OptimizerConfig{}, model.parameters(), nullptr};
  LossScaler scaler;
  std::unique_ptr<RankStep> step;
  StepContext ctx;
  int64_t done = 0;

  Training(Model& m, GradientSync* sync, Collectives* coll, int64_t first_row, int64_t rows)
      : model(m), first(first_row), count(rows) {
    Shape batch = model.desc().input_shape;
    batch.insert(batch.begin(), count);
    step = std::make_unique<RankStep>(model, opt, sync, scaler, batch, count, nullptr, coll);
    ctx.training = true;
    ctx.backward_listener = sync;
  }
  void run(int64_t steps) {
    const int64_t numel = shape_numel(model.desc().input_shape);
    for (int64_t s = 0; s < steps; ++s, ++done) {
      std::mt19937_64 rng(uint64_t(100 + done));
      std::normal_distribution<float> normal(0.5f, 1.0f);
      std::vector<float> images(size_t(GLOBAL_BATCH * numel));
      for (float& v : images) v = normal(rng);
      std::vector<int32_t> targets(static_cast<size_t>(GLOBAL_BATCH), 0);
      for (auto& t : targets) t = int32_t(rng() % 10);
      std::memcpy(step->host_batch().f32(), images.data() + first * numel, size_t(count * numel) * sizeof(float));
      step->host_targets().assign(targets.begin() + first, targets.begin() + first + count);
      ctx.step = done;
      step->run(ctx, float(GLOBAL_BATCH));
    }
  }
};

// The first BatchNorm layer's statistics (its input, the stem convolution of the images, is the
// same rows in every run: the one layer whose statistics one process on the global batch shares).
std::vector<float> first_layer_statistics(const Model& m) {
  std::vector<float> out;
  for (const RunningStatistics::Buffer& b : m.running_statistics()[0]->buffers())
    out.insert(out.end(), b.values->begin(), b.values->end());
  return out;
}

// max |a - b| / max(1e-3, |b|) over the values.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::max(1e-3, std::fabs(double(b[i]))));
  return worst;
}

// Every layer: the synchronized update equals the pooled statistics of both ranks' batches by
// Chan's formula (m2 = m2_0 + m2_1 + n0 n1 / n (mean_0 - mean_1)^2), computed here from the two
// ranks' own sums, exchanged by placing each rank's in its own half of a zeroed sum. Measured:
// 5.8e-8 relative at most (float statistics).
void expect_pooled_update(int rank, Model& model, Collectives& coll, int64_t count) {
  StepContext ctx;  // one training forward: pending sums in every layer
  ctx.training = true;
  Shape shape = model.desc().input_shape;
  shape.insert(shape.begin(), count);
  Tensor x = Tensor::empty(shape, Precision::FP32, nullptr);
  std::mt19937_64 rng(uint64_t(7 + rank));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
  std::vector<std::vector<float>> before;
  for (RunningStatistics* r : model.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers()) before.push_back(*b.values);
  model.forward(x, ctx);
  std::vector<std::vector<double>> sums;  // per layer: [rank 0's sums, rank 1's sums]
  for (RunningStatistics* r : model.running_statistics()) {
    std::vector<double> both(size_t(2 * r->batch_sums_size()), 0.0);
    r->batch_sums(both.data() + rank * r->batch_sums_size());
    coll.all_reduce_sum(both.data(), int64_t(both.size()));
    sums.push_back(both);
  }
  running_statistics_all_reduce(model, coll);
  const float m = 0.9f;  // the exporter's momentum (PyTorch's 0.1)
  double worst = 0;
  size_t at = 0;
  for (size_t l = 0; l < sums.size(); ++l, at += 2) {
    const std::vector<double>& s = sums[l];
    const size_t half = s.size() / 2, C = (half - 1) / 3;
    const double n0 = s[0], n1 = s[half], n = n0 + n1;
    const auto after = model.running_statistics()[l]->buffers();
    for (size_t c = 0; c < C; ++c) {
      const double mean0 = s[1 + c] / n0, mean1 = s[half + 1 + c] / n1;
      const double mean = (s[1 + c] + s[half + 1 + c]) / n;
      const double m2 = s[1 + C + c] + s[half + 1 + C + c] + n0 * n1 / n * (mean0 - mean1) * (mean0 - mean1);
      const double want_mean = before[at][c] * m + mean * (1 - m), want_var = before[at + 1][c] * m + m2 / (n - 1) * (1 - m);
      worst = std::max(worst, std::fabs((*after[0].values)[c] - want_mean) / std::max(1e-3, std::fabs(want_mean)));
      worst = std::max(worst, std::fabs((*after[1].values)[c] - want_var) / std::max(1e-3, std::fabs(want_var)));
    }
  }
  expect(worst < 1e-5, "synchronized statistics vs the pooled batch statistics: " + std::to_string(worst));
}

void rank_body(int rank, Collectives& coll) {
  device_class_activate(device_class_fallback(device_class_by_name("cpu-avx2")), 1);
  const ModelDesc desc = resnet();
  const int64_t half = GLOBAL_BATCH / 2;
  Model model(desc, nullptr, 1);
  HostGradientSync sync(coll, model, DEFAULT_BUCKET_BYTES);
  Training dp(model, &sync, &coll, rank * half, half);
  dp.run(1);

  // Step 1, first layer: one process on the whole batch (rounding: oneDNN sums other batch sizes
  // in other orders), while the rank's own half alone (what each rank kept before) is far off.
  Model single(desc, nullptr, 1), local(desc, nullptr, 1);
  Training(single, nullptr, nullptr, 0, GLOBAL_BATCH).run(1);
  Training(local, nullptr, nullptr, rank * half, half).run(1);
  const double dp_error = worst_relative(first_layer_statistics(model), first_layer_statistics(single));
  const double local_error = worst_relative(first_layer_statistics(local), first_layer_statistics(single));
  // Measured: 0 and 3.9e-2.
  expect(dp_error < 1e-5, "data parallel vs one process, first layer: " + std::to_string(dp_error));
  expect(local_error > 1e-3, "rank-local statistics are only " + std::to_string(local_error) + " from the global ones");

  dp.run(STEPS - 1);
  const std::vector<float> mine = statistics_of(model);
  expect(mine.size() > 100, "the model has running statistics");
  // Equal on both ranks: the sum over ranks (exact in double) is twice this rank's values.
  std::vector<double> sum(mine.begin(), mine.end());
  coll.all_reduce_sum(sum.data(), int64_t(sum.size()));
  for (size_t i = 0; i < mine.size(); ++i)
    expect(sum[i] == 2.0 * double(mine[i]), "value " + std::to_string(i) + " differs between the ranks");
  expect_pooled_update(rank, model, coll, half);
}

TEST(RunningStatisticsSync, TwoRanksHoldEqualStatisticsOfTheGlobalBatch) {
  test::expect_all_succeeded(test::run_ranks(2, std::chrono::milliseconds(20000),
                                             [](int rank, Rendezvous&, Collectives& coll) { rank_body(rank, coll); },
                                             std::chrono::milliseconds(120000)));
}

// One layer's update from sums of two halves equals the update from the whole batch (the sums
// are additive), and a layer with no pending forward applies the sums to its current statistics.
TEST(RunningStatisticsSync, GlobalUpdateFromTwoHalvesEqualsTheWholeBatchUpdate) {
  const ModelDesc desc = resnet();
  Model whole(desc, nullptr, 1), a(desc, nullptr, 1), b(desc, nullptr, 1);
  Shape shape = desc.input_shape;
  shape.insert(shape.begin(), GLOBAL_BATCH);
  Tensor x = Tensor::empty(shape, Precision::FP32, nullptr);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(1.0f, 2.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = normal(rng);
  shape[0] = GLOBAL_BATCH / 2;
  Tensor x0 = Tensor::empty(shape, Precision::FP32, nullptr), x1 = Tensor::empty(shape, Precision::FP32, nullptr);
  std::memcpy(x0.f32(), x.f32(), size_t(x0.numel()) * sizeof(float));
  std::memcpy(x1.f32(), x.f32() + x0.numel(), size_t(x1.numel()) * sizeof(float));
  StepContext ctx;
  ctx.training = true;
  whole.forward(x, ctx);
  a.forward(x0, ctx);
  b.forward(x1, ctx);
  // Only the first BatchNorm sees the same input in all three models (later ones see activations
  // of the halves); compare it.
  RunningStatistics* ra = a.running_statistics()[0];
  RunningStatistics* rb = b.running_statistics()[0];
  std::vector<double> sa(size_t(ra->batch_sums_size())), sb(sa.size());
  ra->batch_sums(sa.data());
  rb->batch_sums(sb.data());
  for (size_t i = 0; i < sa.size(); ++i) sa[i] += sb[i];
  ra->update_from_sums(sa.data());
  const auto want = whole.running_statistics()[0]->buffers(), got = ra->buffers();
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_LT(worst_relative(*got[k].values, *want[k].values), 1e-6) << want[k].name;
  // Redone once: a second update (nothing pending) starts from the updated values.
  const std::vector<float> once = *got[0].values;
  ra->update_from_sums(sa.data());
  EXPECT_NE(*got[0].values, once);
}

}  // namespace
}  // namespace qsync
