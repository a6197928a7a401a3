// File: worker/tp/spd_distill.cpp
// Block-to-block distillation (the SPD paper's B2B): the teacher is the block with its sync (the
// one-rank SPD block, which is exactly that), evaluated once per input sequence; the student is
// the block as N SPD rank shards under the layout, initialised from the same weights. Every weight
// of the student is trained with AdamW on MSE(student(X), teacher(X)) over the training part of
// the calibration inputs; a held-out part (chosen by a seeded shuffle) is only evaluated.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "worker/optimizer.h"
#include "worker/tp/spd_recovery.h"
#include "worker/tp/spd_student_block.h"

namespace qsync {

namespace {

// The sequences `ids` of `inputs` (S, T, C) as one tensor (|ids|, T, C).
Tensor gather_sequences(const std::vector<float>& x, int64_t T, int64_t C, const std::vector<int64_t>& ids,
                        int64_t first, int64_t count) {
  Tensor t = Tensor::empty({count, T, C}, Precision::FP32, nullptr, "distillation batch");
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(t.f32() + i * T * C, x.data() + ids[size_t(first + i)] * T * C, size_t(T * C) * sizeof(float));
  return t;
}

// Mean squared error of the block over the sequences `ids`, evaluated in batches.
double block_mse(SpdStudentBlock& block, const BlockInputs& in, const std::vector<float>& target,
                 const std::vector<int64_t>& ids, int64_t batch) {
  if (ids.empty()) return 0.0;
  StepContext ctx;
  ctx.training = false;
  const int64_t T = in.tokens, C = in.width;
  double sum = 0.0;
  for (int64_t first = 0; first < int64_t(ids.size()); first += batch) {
    const int64_t n = std::min<int64_t>(batch, int64_t(ids.size()) - first);
    const Tensor out = block.forward(gather_sequences(in.x, T, C, ids, first, n), ctx);
    const Tensor want = gather_sequences(target, T, C, ids, first, n);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double d = double(out.f32()[i]) - double(want.f32()[i]);
      sum += d * d;
    }
  }
  return sum / double(int64_t(ids.size()) * T * C);
}

}  // namespace

DistilledBlock spd_distill_block(const TransformerWeights& w, const TpLayout& layout, int64_t block,
                                 const BlockInputs& inputs, const DistillConfig& config) {
  const BlockShape shape = spd_recovery_block_shape(w, block, inputs);
  tp_layout_check(w, layout);
  if (config.epochs < 0 || config.batch_sequences < 1 || config.lr <= 0.0 || config.holdout_fraction < 0.0 ||
      config.holdout_fraction >= 1.0)
    throw std::invalid_argument("SPD distillation: needs epochs >= 0, batch_sequences >= 1, lr > 0 and a held-out "
                                "fraction in [0, 1)");
  const auto start = std::chrono::steady_clock::now();
  const BlockWeights& original = w.blocks[size_t(block)];
  const int64_t S = inputs.sequences, T = inputs.tokens, C = inputs.width;

  // Teacher: the block with its sync, once per sequence.
  std::vector<int> all_heads(size_t(original.heads));
  std::iota(all_heads.begin(), all_heads.end(), 0);
  SpdStudentBlock teacher(original, shape, {all_heads}, {0});
  std::vector<int64_t> every(static_cast<size_t>(S));
  std::iota(every.begin(), every.end(), 0);
  std::vector<float> target(inputs.x.size());
  {
    StepContext ctx;
    ctx.training = false;
    for (int64_t first = 0; first < S; first += config.batch_sequences) {
      const int64_t n = std::min(config.batch_sequences, S - first);
      const Tensor out = teacher.forward(gather_sequences(inputs.x, T, C, every, first, n), ctx);
      std::memcpy(target.data() + first * T * C, out.f32(), size_t(out.numel()) * sizeof(float));
    }
  }

  // Split: a seeded shuffle, the last round(S * fraction) sequences held out (at least one train).
  std::mt19937_64 rng(config.seed);
  std::vector<int64_t> order = every;
  std::shuffle(order.begin(), order.end(), rng);
  int64_t held = int64_t(double(S) * config.holdout_fraction + 0.5);
  if (config.holdout_fraction > 0.0 && held == 0 && S > 1) held = 1;
  held = std::min(held, S - 1);
  std::vector<int64_t> train(order.begin(), order.end() - held), heldout(order.end() - held, order.end());
  std::sort(heldout.begin(), heldout.end());

  SpdStudentBlock student(original, shape, layout.heads_of_rank[size_t(block)],
                          layout.mlp_slice_of_rank[size_t(block)]);
  DistilledBlock result;
  DistillReport& report = result.report;
  report.train_mse_before = block_mse(student, inputs, target, train, config.batch_sequences);
  report.heldout_mse_before = block_mse(student, inputs, target, heldout, config.batch_sequences);

  const int64_t batches_per_epoch = (int64_t(train.size()) + config.batch_sequences - 1) / config.batch_sequences;
  OptimizerConfig oc;
  oc.kind = OptimizerKind::ADAMW;
  oc.lr = config.lr;
  oc.weight_decay = 0.0;
  oc.total_steps = config.epochs * batches_per_epoch;  // cosine to lr / 10 over the run
  const std::vector<Parameter*> params = student.parameters();
  Optimizer optimizer(oc, params, nullptr);
  student.zero_grad();
  StepContext ctx;
  ctx.training = true;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    std::shuffle(train.begin(), train.end(), rng);
    for (int64_t first = 0; first < int64_t(train.size()); first += config.batch_sequences) {
      const int64_t n = std::min<int64_t>(config.batch_sequences, int64_t(train.size()) - first);
      ctx.step = report.steps;
      const Tensor out = student.forward(gather_sequences(inputs.x, T, C, train, first, n), ctx);
      const Tensor want = gather_sequences(target, T, C, train, first, n);
      // loss = mean (out - want)^2 over the batch: dout = 2 (out - want) / numel
      Tensor dout = Tensor::empty(out.shape(), Precision::FP32, nullptr, "distillation loss gradient");
      const float k = 2.0f / float(out.numel());
      for (int64_t i = 0; i < out.numel(); ++i) dout.f32()[i] = k * (out.f32()[i] - want.f32()[i]);
      student.backward(dout, ctx);
      optimizer.step(report.steps);
      student.zero_grad();
      ++report.steps;
    }
  }

  report.train_mse_after = block_mse(student, inputs, target, train, config.batch_sequences);
  report.heldout_mse_after = block_mse(student, inputs, target, heldout, config.batch_sequences);
  result.weights = student.weights();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace qsync
