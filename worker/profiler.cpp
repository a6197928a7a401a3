// File: worker/profiler.cpp
// The device profile measurement of `qsync-worker profile` (see profiler.h).
#include "worker/profiler.h"

#include "planner/cli_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "kernels/device_class.h"
#include "planner/median.h"
#include "planner/replayer.h"
#include "worker/dist/collectives.h"
#include "worker/dist/rendezvous.h"
#include "worker/model.h"
#include "worker/ops/rank_device.h"
#include "worker/precision_ops.h"
#include "worker/profile_charges.h"
#include "worker/profile_steps.h"

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

namespace {

// Bad settings fail before anything is measured.
void check_profile_config(const ProfileConfig& c) {
  if (c.batch <= 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(c.batch));
  if (c.steps < 1) throw std::invalid_argument("--steps must be at least 1, got " + std::to_string(c.steps));
  if (c.rounds < 1) throw std::invalid_argument("--rounds must be at least 1, got " + std::to_string(c.rounds));
  if (c.device_class.empty())
    throw std::invalid_argument("--device-class is required: the profile is of one class (cpu-amx, cpu-avx512, cpu-avx2)");
  if (!c.out.empty()) {
    const std::filesystem::path dir = std::filesystem::absolute(c.out).parent_path();
    if (!std::filesystem::is_directory(dir))
      throw std::invalid_argument("--out " + c.out + ": directory " + dir.string() + " does not exist: create it first");
  }
}

// The precisions to measure on `device`, each with its own samples; the layer precisions it
// cannot run go to `skipped`, those it emulates to `emulated` (comma-separated names).
std::vector<PrecisionRun> precision_runs(const DeviceClass& device, SampleCenter center, std::string& skipped,
                                         std::string& emulated) {
  const std::vector<PrecisionCapability> caps = device_class_capabilities(device);
  auto level_of = [&caps](Precision q) {
    for (const PrecisionCapability& cap : caps)
      if (cap.precision == q) return cap.level;
    return SupportLevel::UNSUPPORTED;
  };
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
  return runs;
}

// Each run's GEMM layers' costs, and from the FP32 run the other layers' (an attention layer's
// own part: minus its qkv and proj GEMM layers).
void record_layer_costs(DeviceProfile& p, const ModelDesc& desc, const Model& model, std::vector<PrecisionRun>& runs) {
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
      if (l->kind == LayerKind::ATTENTION)
        for (const LayerDesc& child : l->children) {
          const LayerCost& g = p.gemm_layers[child.name][LayerPrecision::FP32];
          cost.forward_seconds = std::max(0.0, cost.forward_seconds - g.forward_seconds);
          cost.backward_seconds = std::max(0.0, cost.backward_seconds - g.backward_seconds);
          cost.saved_bytes = std::max<int64_t>(0, cost.saved_bytes - saved[child.name]);
        }
      p.other_layers[l->name] = cost;
    }
  }
}

// Where the profile was measured and how, for DeviceProfile::source.
std::string profile_source(const ProfileConfig& c, const DeviceClass& device, const RankDevice& rank_device,
                           SampleCenter center, const Collectives* coll, size_t world_steps,
                           const std::string& emulated, const std::string& skipped) {
  std::string s = "measured on " +
                  (rank_device.is_cuda() ? rank_device.describe() + ", CUDA events" : cpu_model_name()) + " as " +
                  device.name + " (" + std::to_string(c.threads) + " thread" + (c.threads == 1 ? "" : "s") +
                  (center == SampleCenter::MEAN ? "), mean of " : "), median of ") + std::to_string(c.rounds) +
                  " round" + (c.rounds == 1 ? "" : "s") + " of " + std::to_string(c.steps) +
                  " steps after a warm-up, " + optimizer_kind_name(c.optimizer.kind) + ", " +
                  (c.data.empty() ? "synthetic data" : "data " + c.data);
  if (!emulated.empty()) s += "; emulated: " + emulated;
  if (!skipped.empty()) s += "; unsupported: " + skipped;
  if (coll) {
    s += "; rank " + std::to_string(coll->rank()) + " of a world of " + std::to_string(coll->world_size()) +
         " synchronizing gradients every step";
    if (c.shared_cpus)
      s += ", sharing the CPUs, its whole FP32 step over " + std::to_string(world_steps) + " steps in blocks a round";
  }
  return s;
}

}  // namespace

DeviceProfile profile_run(const ProfileConfig& c) {
  check_profile_config(c);
  const ModelDesc desc = model_desc_find(c.model);
  const DeviceClass& device = device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);
  RankDevice rank_device(device);  // GPU classes: timed with CUDA events on the rank's GPU

  // In a world (RANK/WORLD_SIZE set, as `qsync run` does for a multi-rank pool), every step also
  // synchronizes its gradients as training does: the gradient-sync and Gloo threads then share
  // this rank's CPUs while it computes (Gloo's event loop on training's policy), and the measured
  // costs include what they take. The waits are in no op's cost; the world's whole FP32 steps,
  // waits included, are kept apart (world_step_seconds).
  World world = world_join(rendezvous_config_with_overrides(-1, -1, "", -1, 120), GlooLoopPolicy::kSchedIdle);
  Collectives* coll = world.collectives->world_size() > 1 ? world.collectives.get() : nullptr;

  // Rounds cycle through the precisions so that a slow phase of a shared machine (seconds long)
  // lands on every precision alike.
  const SampleCenter center = profile_sample_center(c);
  std::string skipped, emulated;
  std::vector<PrecisionRun> runs = precision_runs(device, center, skipped, emulated);
  ProfileSteps steps(c, desc, device, rank_device.ops(), coll, runs.size());
  for (int64_t round = 0; round < c.rounds; ++round) {
    for (size_t turn = 0; turn < steps.turns(); ++turn) {
      PrecisionRun& run = runs[turn % runs.size()];
      // Turn 0 runs every rank's first precision, FP32 (every class has it): the whole world
      // steps as a uniform FP32 job would, waits included.
      const bool world_turn = coll && turn == 0 && run.mode == LayerPrecision::FP32 && !c.shared_cpus;
      steps.run_turn(run, round == 0, world_turn);
    }
    if (coll && c.shared_cpus) steps.run_world_fp32_block();
  }

  DeviceProfile p;
  p.model = desc.name;
  p.model_hash = desc.hash;
  p.device_class = device.name;
  p.batch = c.batch;
  Model& model = steps.model();
  record_layer_costs(p, desc, model, runs);
  charge_fused_pools_to_layers(p, runs);
  profile_fit_casts(p, steps.context());
  p.optimizer_seconds = center_of(steps.optimizer_seconds(), center);
  charge_int8_copies_to_layers(p, desc, model, runs, center);
  for (const Parameter* q : model.parameters()) p.static_bytes += q->value.bytes() + q->grad.bytes();
  for (const Tensor* s : steps.optimizer().state()) p.static_bytes += s->bytes();
  // The step residual: a whole FP32 step as measured minus what the replayer predicts from the
  // parts (device_profile.h), in this profile's world (where the measured step also copied its
  // gradients into the all-reduce buckets: the MLP's 1.9 M, 0.14 ms).
  const std::vector<double>& fp32_steps = steps.fp32_step_seconds();
  if (!fp32_steps.empty()) {
    const RankPrediction parts = replay_profile_fp32_step(desc, p, coll ? coll->world_size() : 1, 25ll << 20);
    p.step_overhead_seconds = std::max(0.0, center_of(fp32_steps, center) - parts.compute_seconds);
    p.step_overhead_bytes = std::max<int64_t>(0, steps.fp32_peak_bytes() - parts.peak_memory_bytes);
    p.step_jitter = step_jitter_of(fp32_steps, c.steps);
  }
  if (coll && !steps.world_step_seconds().empty()) {
    p.world_size = coll->world_size();
    p.world_step_seconds = median_of(steps.world_step_seconds());
    p.world_signature = c.world_signature;
  }
  p.source = profile_source(c, device, rank_device, center, coll, steps.world_step_seconds().size(), emulated, skipped);
  if (!c.out.empty()) device_profile_write(c.out, p);
  if (!c.quiet) {
    std::fputs(profile_summary(p).c_str(), stdout);
    if (!c.out.empty()) std::printf("profile written to %s\n", c.out.c_str());
  }
  return p;
}

}  // namespace qsync
