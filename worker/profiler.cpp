// File: worker/profiler.cpp
// The device profile measurement of `qsync-worker profile` (see profiler.h).
#include "worker/profiler.h"

#include "planner/cli_args.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>

#include "kernels/device_class.h"
#include "planner/median.h"
#include "planner/replayer.h"
#include "worker/data/batch_loader.h"
#include "worker/dist/collectives.h"
#include "worker/dist/gradient_sync.h"
#include "worker/dist/rendezvous.h"
#include "worker/loss.h"
#include "worker/model.h"
#include "worker/ops/rank_device.h"
#include "worker/precision_ops.h"
#include "worker/profile_charges.h"
#include "worker/train_data.h"
#include "worker/train_step.h"

namespace qsync {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "an unknown CPU";
}

// Training batches: the real data when a path is given, else synthetic ones of the same shape
// (uniform pixels or token ids; the costs do not depend on the values).
class ProfileBatches {
 public:
  ProfileBatches(const ModelDesc& m, const std::string& data, int64_t batch, uint64_t seed, MemoryAccount* memory)
      : rng_(seed) {
    Shape s = m.input_shape;
    s.insert(s.begin(), batch);
    x_ = Tensor::empty(s, Precision::FP32, nullptr, "profile batch");
    (void)memory;
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
  // The next batch into the step's host buffers.
  void next(Tensor& x, std::vector<int32_t>& targets) {
    if (loader_) loader_->next(x_, targets_);
    std::memcpy(x.data(), x_.data(), size_t(x_.bytes()));
    targets = targets_;
  }
  const std::vector<int32_t>& targets() const { return targets_; }
  int64_t positions_per_sample() const { return positions_; }

 private:
  std::mt19937_64 rng_;
  Tensor x_;
  std::vector<int32_t> targets_;
  int64_t positions_ = 1;
  std::unique_ptr<TrainingData> loader_;
};

Shape batches_shape(const ModelDesc& m, int64_t batch) {
  Shape s = m.input_shape;
  s.insert(s.begin(), batch);
  return s;
}

// A GEMM layer's seconds for a phase: its leaf timing, or (attention's projections, which the
// containers do not time) the sum of its sub-ops.
double gemm_phase_seconds(const OpStepSamples& t, const std::string& layer, bool forward) {
  const std::string whole = layer + (forward ? ".forward" : ".backward");
  if (t.has(whole)) return t.center(whole);
  static const char* const FORWARD_OPS[] = {".cast_x", ".cast_w", ".gemm_forward"};
  static const char* const BACKWARD_OPS[] = {".cast_dy", ".cast_saved_x", ".cast_saved_w", ".cast_w_backward",
                                             ".gemm_input_grad", ".gemm_weight_grad"};
  double s = 0;
  if (forward)
    for (const char* op : FORWARD_OPS) s += t.center(layer + op);
  else
    for (const char* op : BACKWARD_OPS) s += t.center(layer + op);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// OpStepSamples

void OpStepSamples::record(const std::string& op, double seconds) { current_[op] += seconds; }

void OpStepSamples::end_step() {
  for (const auto& [op, s] : current_) samples_[op].push_back(s);
  current_.clear();
}

void OpStepSamples::discard_step() { current_.clear(); }

double OpStepSamples::center(const std::string& op) const {
  const auto it = samples_.find(op);
  return it == samples_.end() ? 0.0 : center_of(it->second, center_);
}

double center_of(const std::vector<double>& samples, SampleCenter c) {
  if (c == SampleCenter::MEDIAN || samples.empty()) return median_of(samples);
  double sum = 0;
  for (double s : samples) sum += s;
  return sum / double(samples.size());
}

SampleCenter profile_sample_center(const ProfileConfig& c) {
  return c.shared_cpus ? SampleCenter::MEAN : SampleCenter::MEDIAN;
}

size_t OpStepSamples::steps(const std::string& op) const {
  const auto it = samples_.find(op);
  return it == samples_.end() ? 0 : it->second.size();
}

// The relative step-to-step spread of `seconds` (rounds of `per_round` consecutive steps): the
// standard deviation estimated robustly from successive differences within each round (the
// median absolute difference / 0.6745 / sqrt 2), over the median step. Differences of neighbours
// leave out the slow drift of a shared machine between rounds; 0 with fewer than 2 per round.
double step_jitter_of(const std::vector<double>& seconds, int64_t per_round) {
  std::vector<double> diffs;
  for (size_t i = 1; i < seconds.size(); ++i)
    if (per_round > 1 && int64_t(i) % per_round != 0) diffs.push_back(std::fabs(seconds[i] - seconds[i - 1]));
  const double mid = median_of(seconds);
  if (diffs.empty() || !(mid > 0)) return 0;
  return median_of(diffs) / 0.6745 / std::sqrt(2.0) / mid;
}

// ---------------------------------------------------------------------------------------------
// The measurement

DeviceProfile profile_run(const ProfileConfig& c) {
  if (c.batch <= 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(c.batch));
  if (c.steps < 1) throw std::invalid_argument("--steps must be at least 1, got " + std::to_string(c.steps));
  if (c.rounds < 1) throw std::invalid_argument("--rounds must be at least 1, got " + std::to_string(c.rounds));
  if (c.device_class.empty())
    throw std::invalid_argument("--device-class is required: the profile is of one class (cpu-amx, cpu-avx512, cpu-avx2)");
  if (!c.out.empty()) {  // fail before measuring, not after
    const std::filesystem::path dir = std::filesystem::absolute(c.out).parent_path();
    if (!std::filesystem::is_directory(dir))
      throw std::invalid_argument("--out " + c.out + ": directory " + dir.string() + " does not exist: create it first");
  }
  const ModelDesc desc = model_desc_find(c.model);
  const DeviceClass& device = device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);
  RankDevice rank_device(device);  // GPU classes: timed with CUDA events on the rank's GPU
  DeviceOps& ops = rank_device.ops();

  // In a world (RANK/WORLD_SIZE set, as `qsync run` does for a multi-rank pool), every step also
  // synchronizes its gradients as training does: the gradient-sync and Gloo threads then share
  // this rank's CPUs while it computes (Gloo's event loop on training's policy), and the measured
  // costs include what they take. The waits are in no op's cost; the world's whole FP32 steps,
  // waits included, are kept apart (world_step_seconds).
  World world = world_join(rendezvous_config_with_overrides(-1, -1, "", -1, 120), GlooLoopPolicy::kSchedIdle);
  Collectives* coll = world.collectives->world_size() > 1 ? world.collectives.get() : nullptr;

  MemoryAccount memory(0, "profile");
  Model model(desc, &memory, c.seed, &ops);
  Optimizer opt(c.optimizer, model.parameters(), &memory, &ops);
  ProfileBatches batches(desc, c.data, c.batch, c.seed, &memory);
  StepContext ctx;
  ctx.ops = &ops;
  ctx.memory = &memory;
  ctx.seed = c.seed;
  set_sixteen_bit_for(device, ctx);

  DeviceProfile p;
  p.model = desc.name;
  p.model_hash = desc.hash;
  p.device_class = device.name;
  p.batch = c.batch;
  const float divisor = float(double(c.batch) * double(batches.positions_per_sample()));
  std::vector<double> optimizer_seconds, fp32_step_seconds, world_step_seconds;
  const SampleCenter center = profile_sample_center(c);
  int64_t fp32_peak_bytes = 0;
  int64_t step = 0;
  std::string skipped, emulated;

  const std::vector<PrecisionCapability> caps = device_class_capabilities(device);
  auto level_of = [&caps](Precision q) {
    for (const PrecisionCapability& cap : caps)
      if (cap.precision == q) return cap.level;
    return SupportLevel::UNSUPPORTED;
  };
  // The precisions to measure, each with its own samples. Rounds cycle through them so that a
  // slow phase of a shared machine (seconds long) lands on every precision alike.
  std::vector<PrecisionRun> runs;
  for (const LayerPrecisionTraits& t : layer_precision_table()) {
    const SupportLevel level = level_of(t.forward);
    if (level == SupportLevel::UNSUPPORTED || !layer_precision_support(device, t.mode).ok) {
      skipped += std::string(skipped.empty() ? "" : ", ") + t.name;
      continue;
    }
    if (level == SupportLevel::EMULATED) emulated += std::string(emulated.empty() ? "" : ", ") + t.name;
    runs.push_back({t.mode, OpStepSamples(center), {}, {}, false, {}});
  }
  std::unique_ptr<GradientSync> sync;
  size_t turns = runs.size();  // precision turns per round: in a world, the most any rank has
  if (coll) {
    sync = gradient_sync_create(*coll, nullptr, model, 25ll << 20);
    ctx.backward_listener = sync.get();
    const uint64_t mine = runs.size();
    std::vector<uint64_t> all(size_t(coll->world_size()));
    coll->all_gather(&mine, all.data(), 1);
    turns = size_t(*std::max_element(all.begin(), all.end()));
  }
  LossScaler no_scaling;
  RankStep step_runner(model, opt, sync.get(), no_scaling, batches_shape(desc, c.batch),
                       c.batch * batches.positions_per_sample(), &memory);
  // One step as training runs it, in a world ended by the step's stats all-reduce; its whole
  // seconds, the waits included. `more`: this rank's vote, carried by that all-reduce, to go on
  // stepping; returned in it, whether any rank voted so (every rank gets the same answer).
  auto run_step = [&](StepOutcome& out, bool* more = nullptr) {
    ctx.step = step++;
    batches.next(step_runner.host_batch(), step_runner.host_targets());
    const auto start = std::chrono::steady_clock::now();
    out = step_runner.run(ctx, divisor);  // the sync's wait is not this class's cost
    if (coll) {
      double stats[4] = {out.loss_sum, more != nullptr && *more ? 1.0 : 0.0, 0, 0};
      coll->all_reduce_sum(stats, 4);
      if (more != nullptr) *more = stats[1] > 0;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // Where the ranks share the CPUs, each round ends with a block of whole FP32 steps, one after
  // another as training runs them, after a warm-up step: at least SHARED_WORLD_BLOCK_STEPS and
  // SHARED_WORLD_BLOCK_SECONDS (rank 0's clock decides). The world's step, spread over the
  // rounds as the costs are.
  auto world_fp32_block = [&] {
    model.apply_plan(plan_uniform(desc, LayerPrecision::FP32));
    step_runner.after_forward = nullptr;
    StepOutcome out;
    run_step(out);  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int64_t s = 1;; ++s) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bool more = coll->rank() == 0 && s < SHARED_WORLD_BLOCK_MAX_STEPS &&
                  (s < SHARED_WORLD_BLOCK_STEPS || elapsed < SHARED_WORLD_BLOCK_SECONDS);
      world_step_seconds.push_back(run_step(out, &more));
      if (!more) break;
    }
  };
  for (int64_t round = 0; round < c.rounds; ++round) {
    for (size_t turn = 0; turn < turns; ++turn) {
      PrecisionRun& run = runs[turn % runs.size()];
      model.apply_plan(plan_uniform(desc, run.mode));
      ctx.timer = &run.timer;
      memory.reset_peak();
      for (int64_t s = 0; s <= c.steps; ++s) {  // s == 0: warm-up, discarded
        step_runner.after_forward = [&, s] {
          if (round == 0 && s == 1) {
            model.visit_layers([&run](Layer& l) { run.saved[l.name()] = l.saved_bytes(); });
            record_fused_pools(model, run);
          }
        };
        StepOutcome out;
        const double whole = run_step(out);
        if (s > 0) optimizer_seconds.push_back(out.optimizer_seconds);
        if (s > 0) run.optimizer_seconds.push_back(out.optimizer_seconds);
        if (s > 0 && run.mode == LayerPrecision::FP32) fp32_step_seconds.push_back(out.compute_seconds + out.optimizer_seconds);
        // Turn 0 runs every rank's first precision, FP32 (every class has it): the whole world
        // steps as a uniform FP32 job would, waits included.
        if (coll && s > 0 && turn == 0 && run.mode == LayerPrecision::FP32 && !c.shared_cpus)
          world_step_seconds.push_back(whole);
        if (s == 0) run.timer.discard_step();
        else run.timer.end_step();
      }
      ctx.timer = nullptr;
      for (const Parameter* q : model.parameters()) run.made_int8_rows = run.made_int8_rows || q->int8_rows.defined();
      if (run.mode == LayerPrecision::FP32) fp32_peak_bytes = std::max(fp32_peak_bytes, memory.peak_bytes());
    }
    if (coll && c.shared_cpus) world_fp32_block();
  }
  for (PrecisionRun& run : runs) {
    const LayerPrecisionTraits& t = layer_precision_traits(run.mode);
    const OpStepSamples& timer = run.timer;
    std::map<std::string, int64_t>& saved = run.saved;
    for (const LayerDesc* l : model_gemm_layers(desc)) {
      LayerCost cost;
      cost.forward_seconds = gemm_phase_seconds(timer, l->name, true);
      cost.backward_seconds = gemm_phase_seconds(timer, l->name, false);
      cost.weight_bytes = !t.weight_copy ? 0 : weight_numel(model, l->name) * precision_bytes(t.saved_weight);
      cost.saved_bytes = std::max<int64_t>(0, saved[l->name] - cost.weight_bytes);
      p.gemm_layers[l->name][t.mode] = cost;
    }
    if (t.mode != LayerPrecision::FP32) continue;
    for (const LayerDesc* l : model_leaf_layers(desc)) {
      if (l->kind == LayerKind::LINEAR || l->kind == LayerKind::CONV2D) continue;
      LayerCost cost;
      cost.forward_seconds = timer.center(l->name + ".forward");
      cost.backward_seconds = timer.center(l->name + ".backward");
      cost.saved_bytes = saved[l->name];
      if (l->kind == LayerKind::ATTENTION)  // its own part: minus the qkv and proj GEMM layers
        for (const LayerDesc& child : l->children) {
          const LayerCost& g = p.gemm_layers[child.name][LayerPrecision::FP32];
          cost.forward_seconds = std::max(0.0, cost.forward_seconds - g.forward_seconds);
          cost.backward_seconds = std::max(0.0, cost.backward_seconds - g.backward_seconds);
          cost.saved_bytes = std::max<int64_t>(0, cost.saved_bytes - saved[child.name]);
        }
      p.other_layers[l->name] = cost;
    }
  }
  charge_fused_pools_to_layers(p, runs);
  profile_fit_casts(p, ctx);
  p.optimizer_seconds = center_of(optimizer_seconds, center);
  charge_int8_copies_to_layers(p, desc, model, runs, center);
  for (const Parameter* q : model.parameters()) p.static_bytes += q->value.bytes() + q->grad.bytes();
  for (const Tensor* s : opt.state()) p.static_bytes += s->bytes();
  // The step residual: a whole FP32 step as measured minus what the replayer predicts from the
  // parts (device_profile.h), in this profile's world (where the measured step also copied its
  // gradients into the all-reduce buckets: the MLP's 1.9 M, 0.14 ms).
  if (!fp32_step_seconds.empty()) {
    const RankPrediction parts = replay_profile_fp32_step(desc, p, coll ? coll->world_size() : 1, 25ll << 20);
    p.step_overhead_seconds = std::max(0.0, center_of(fp32_step_seconds, center) - parts.compute_seconds);
    p.step_overhead_bytes = std::max<int64_t>(0, fp32_peak_bytes - parts.peak_memory_bytes);
    p.step_jitter = step_jitter_of(fp32_step_seconds, c.steps);
  }
  if (coll && !world_step_seconds.empty()) {
    p.world_size = coll->world_size();
    p.world_step_seconds = median_of(world_step_seconds);
    p.world_signature = c.world_signature;
  }
  p.source = "measured on " + (rank_device.is_cuda() ? rank_device.describe() + ", CUDA events" : cpu_model_name()) +
             " as " + device.name + " (" + std::to_string(c.threads) + " thread" + (c.threads == 1 ? "" : "s") +
             (center == SampleCenter::MEAN ? "), mean of " : "), median of ") + std::to_string(c.rounds) + " round" +
             (c.rounds == 1 ? "" : "s") + " of " + std::to_string(c.steps) + " steps after a warm-up, " + optimizer_kind_name(c.optimizer.kind) + ", " +
             (c.data.empty() ? "synthetic data" : "data " + c.data) +
             (emulated.empty() ? "" : "; emulated: " + emulated) + (skipped.empty() ? "" : "; unsupported: " + skipped) +
             (coll ? "; rank " + std::to_string(coll->rank()) + " of a world of " + std::to_string(coll->world_size()) +
                         " synchronizing gradients every step" +
                         (c.shared_cpus ? ", sharing the CPUs, its whole FP32 step over " +
                                              std::to_string(world_step_seconds.size()) + " steps in blocks a round"
                                        : std::string())
                   : std::string());
  if (!c.out.empty()) device_profile_write(c.out, p);
  if (!c.quiet) {
    std::fputs(profile_summary(p).c_str(), stdout);
    if (!c.out.empty()) std::printf("profile written to %s\n", c.out.c_str());
  }
  return p;
}

}  // namespace qsync
