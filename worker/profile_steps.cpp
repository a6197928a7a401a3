// File: worker/profile_steps.cpp
// The profile's batches and steps (see profile_steps.h).
#include "worker/profile_steps.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "planner/plan_file.h"
#include "worker/precision_ops.h"

namespace qsync {
namespace {

Shape batches_shape(const ModelDesc& m, int64_t batch) {
  Shape s = m.input_shape;
  s.insert(s.begin(), batch);
  return s;
}

// The all-reduce buckets of the profile's gradient sync: training's default.
constexpr int64_t PROFILE_BUCKET_BYTES = 25ll << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ProfileBatches

ProfileBatches::ProfileBatches(const ModelDesc& m, const std::string& data, int64_t batch, uint64_t seed) : rng_(seed) {
  x_ = Tensor::empty(batches_shape(m, batch), Precision::FP32, nullptr, "profile batch");
  const bool tokens = m.input_kind == InputKind::TOKENS;
  positions_ = tokens ? m.input_shape.at(0) : 1;
  if (!data.empty()) {
    loader_ = TrainingData::open(m, data, BatchSharding::single(batch), seed, 1);
    return;
  }
  const int64_t classes = m.task == ModelTask::LANGUAGE_MODEL ? m.vocab : m.classes;
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(0, m.vocab - 1));
  float* x = x_.f32();
  for (int64_t i = 0; i < x_.numel(); ++i) x[i] = tokens ? float(token(rng_)) : pixel(rng_);
  std::uniform_int_distribution<int32_t> target(0, int32_t(std::max<int64_t>(1, classes) - 1));
  targets_.resize(size_t(batch * positions_));
  for (int32_t& t : targets_) t = target(rng_);
}

void ProfileBatches::next(Tensor& x, std::vector<int32_t>& targets) {
  if (loader_) loader_->next(x_, targets_);
  std::memcpy(x.data(), x_.data(), size_t(x_.bytes()));
  targets = targets_;
}

// ---------------------------------------------------------------------------------------------
// ProfileSteps

ProfileSteps::ProfileSteps(const ProfileConfig& c, const ModelDesc& desc, const DeviceClass& device, DeviceOps& ops,
                           Collectives* coll, size_t runs)
    : c_(c),
      desc_(desc),
      coll_(coll),
      memory_(0, "profile"),
      model_(desc, &memory_, c.seed, &ops),
      opt_(c.optimizer, model_.parameters(), &memory_, &ops),
      batches_(desc, c.data, c.batch, c.seed),
      sync_(coll ? gradient_sync_create(*coll, nullptr, model_, PROFILE_BUCKET_BYTES) : nullptr),
      step_runner_(model_, opt_, sync_.get(), no_scaling_, batches_shape(desc, c.batch),
                   c.batch * batches_.positions_per_sample(), &memory_),
      divisor_(float(double(c.batch) * double(batches_.positions_per_sample()))),
      turns_(runs) {
  ctx_.ops = &ops;
  ctx_.memory = &memory_;
  ctx_.seed = c.seed;
  set_sixteen_bit_for(device, ctx_);
  if (coll_) {
    ctx_.backward_listener = sync_.get();
    const uint64_t mine = runs;
    std::vector<uint64_t> all(size_t(coll_->world_size()));
    coll_->all_gather(&mine, all.data(), 1);
    turns_ = size_t(*std::max_element(all.begin(), all.end()));
  }
}

double ProfileSteps::run_step(StepOutcome& out, bool* more) {
  ctx_.step = step_++;
  batches_.next(step_runner_.host_batch(), step_runner_.host_targets());
  const auto start = std::chrono::steady_clock::now();
  out = step_runner_.run(ctx_, divisor_);  // the sync's wait is not this class's cost
  if (coll_) {
    double stats[4] = {out.loss_sum, more != nullptr && *more ? 1.0 : 0.0, 0, 0};
    coll_->all_reduce_sum(stats, 4);
    if (more != nullptr) *more = stats[1] > 0;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ProfileSteps::run_turn(PrecisionRun& run, bool first_round, bool world_turn) {
  model_.apply_plan(plan_uniform(desc_, run.mode));
  ctx_.timer = &run.timer;
  memory_.reset_peak();
  for (int64_t s = 0; s <= c_.steps; ++s) {  // s == 0: warm-up, discarded
    step_runner_.after_forward = [this, &run, first_round, s] {
      if (first_round && s == 1) {
        model_.visit_layers([&run](Layer& l) { run.saved[l.name()] = l.saved_bytes(); });
        record_fused_pools(model_, run);
      }
    };
    StepOutcome out;
    const double whole = run_step(out);
    if (s == 0) {
      run.timer.discard_step();
      continue;
    }
    run.timer.end_step();
    optimizer_seconds_.push_back(out.optimizer_seconds);
    run.optimizer_seconds.push_back(out.optimizer_seconds);
    if (run.mode == LayerPrecision::FP32) fp32_step_seconds_.push_back(out.compute_seconds + out.optimizer_seconds);
    if (world_turn) world_step_seconds_.push_back(whole);
  }
  ctx_.timer = nullptr;
  for (const Parameter* q : model_.parameters()) run.made_int8_rows = run.made_int8_rows || q->int8_rows.defined();
  if (run.mode == LayerPrecision::FP32) fp32_peak_bytes_ = std::max(fp32_peak_bytes_, memory_.peak_bytes());
}

void ProfileSteps::run_world_fp32_block() {
  model_.apply_plan(plan_uniform(desc_, LayerPrecision::FP32));
  step_runner_.after_forward = nullptr;
  StepOutcome out;
  run_step(out);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 1;; ++s) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bool more = coll_->rank() == 0 && s < SHARED_WORLD_BLOCK_MAX_STEPS &&
                (s < SHARED_WORLD_BLOCK_STEPS || elapsed < SHARED_WORLD_BLOCK_SECONDS);
    world_step_seconds_.push_back(run_step(out, &more));
    if (!more) break;
  }
}

}  // namespace qsync
