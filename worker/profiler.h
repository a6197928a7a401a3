// File: worker/profiler.h
// `qsync-worker profile`: measures the device profile (planner/device_profile.h) of one model on
// the device class this process runs as, at one local batch.
//
// For each layer precision whose forward format the class can compute (kernels
// device_class_capabilities: UNSUPPORTED ones are skipped, EMULATED ones are real choices and are
// profiled), the model trains a few steps under a uniform plan: one warm-up step is discarded,
// then every op's per-step seconds are kept. The precisions take turns over several rounds (a
// shared machine has slow phases seconds long; turns spread them over every precision) and each
// op's median (mean, where ranks share the CPUs: SampleCenter) is taken over all rounds.
// Recorded per GEMM layer:
// "<layer>.forward" / "<layer>.backward" (they include the layer's own casts; attention's qkv and
// proj are not timed as leaves, so their costs are the sums of their ".cast_*" and ".gemm_*"
// ops), the saved input bytes and the weight-copy bytes. From the FP32 run: the non-GEMM leaves
// (an attention leaf minus its two projections). The casts of worker/precision_ops.h are
// micro-benchmarked over 8 sizes from 4K to 4M elements (median of reps) and fitted with
// fit_linear_cost. Also the optimizer step (median) and the static bytes (parameters, gradients,
// optimizer state). In a world, also the median whole step of the first turn of each round,
// where every rank runs FP32, or of a block of FP32 steps a round where the ranks share the CPUs
// (DeviceProfile::world_step_seconds: waits and stats all-reduce in; ProfileConfig::shared_cpus).
//
//   ProfileConfig c{.model = "mlp", .device_class = "cpu-avx2", .batch = 128, .out = "p.json"};
//   DeviceProfile p = profile_run(c);   // activates the class: one class per process
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "worker/layer.h"
#include "worker/optimizer.h"

namespace qsync {

struct ProfileConfig {
  std::string model;         // zoo name or model file
  std::string device_class;  // the class to run as (required)
  int64_t batch = 0;         // the local batch (required, > 0)
  int threads = 1;
  std::string data;          // Fashion-MNIST dir / text file; empty: synthetic batches (same cost)
  int64_t steps = 5;         // measured steps per precision and round, after one discarded warm-up step
  int64_t rounds = 3;        // passes over the precisions; every op's median is over all rounds' steps
  std::string out;           // where the profile JSON goes ("": not written)
  std::string world_signature;  // names the world it runs in (DeviceProfile::world_signature)
  // The world's ranks share the CPUs (unpinned, as `qsync run` runs a pool of more threads than
  // CPUs): every cost is the mean of its samples, not their median (profile_sample_center), and
  // world_step_seconds is measured over a block of whole FP32 steps at the end of each round
  // (SHARED_WORLD_BLOCK_*), one after another as training runs them, rather than over the
  // rounds' first turns. Every rank of the world must pass the same.
  bool shared_cpus = false;
  OptimizerConfig optimizer; // AdamW by default, as `train`
  uint64_t seed = 1;
  bool quiet = false;        // no summary table on stdout
};

// The block of whole FP32 steps a world of ranks sharing the CPUs measures at the end of each
// round (ProfileConfig::shared_cpus): at least this many steps and this long, at most so many.
// From the rounds' first turns (3 rounds of 5 steps, each after other precisions' turns) a pool
// of 4 ranks on 2 CPUs measured its MLP step 9-10% longer than its training runs did, three
// profilings out of three. Its whole step moves in phases: blocks of 10 steps (0.2 s) had
// medians of 18.6-23.0 ms over four profilings, up to 3.6 ms apart within one (its uniform FP32
// training runs of 3 s: 19.5-19.9 ms), and one profiling of 3 such blocks put the world 13.5%
// above its runs; over ~150 steps (1 s a round) four profilings gave 19.7-20.2 ms.
constexpr int64_t SHARED_WORLD_BLOCK_STEPS = 10;
constexpr double SHARED_WORLD_BLOCK_SECONDS = 1.0;
constexpr int64_t SHARED_WORLD_BLOCK_MAX_STEPS = 500;

// What a cost is of its per-step samples. Alone on its CPUs a step is rarely preempted: the
// median keeps a rare slow step out. Where ranks share CPUs, preemption lands in some op of
// nearly every step: the median of each op leaves it out of every op, so their sum fell short of
// the median whole step by 0.9-19.5 ms from one profile to the next (CNN, 3 ranks on 2 CPUs), a
// residual (DeviceProfile::step_overhead_seconds) that charged one rank's every plan; means add
// up (residuals 0.3-2.2 ms).
enum class SampleCenter { MEDIAN, MEAN };
double center_of(const std::vector<double>& samples, SampleCenter c);  // 0 for no samples
SampleCenter profile_sample_center(const ProfileConfig& c);  // MEAN where c.shared_cpus

// An OpTimer keeping, per op, one sample per step (the sum of the op's calls within the step).
class OpStepSamples : public OpTimer {
 public:
  explicit OpStepSamples(SampleCenter c = SampleCenter::MEDIAN) : center_(c) {}
  void record(const std::string& op, double seconds) override;
  void end_step();      // keeps the current step's sums as one sample per op
  void discard_step();  // drops them (a warm-up step)
  bool has(const std::string& op) const { return samples_.count(op) > 0; }
  double center(const std::string& op) const;  // of the op's samples (SampleCenter); 0 when it never ran
  size_t steps(const std::string& op) const;

 private:
  SampleCenter center_;
  std::map<std::string, double> current_;
  std::map<std::string, std::vector<double>> samples_;
};

// Micro-benchmarks the casts of worker/precision_ops.h in `ctx` (its sixteen_bit settings decide
// the INT8 -> 16-bit cast) and fills p.casts ((FP32, BF16), (FP32, FP16), (FP32, INT8) per
// tensor, (FP32, FP8_E4M3), (INT8, ctx.sixteen_bit)) and p.channel_casts ((FP32, INT8)).
void profile_fit_casts(DeviceProfile& p, StepContext& ctx, int reps = 5);

// DeviceProfile::step_jitter from whole-step seconds measured in rounds of `per_round`
// consecutive steps: a robust standard deviation of neighbouring steps (the median absolute
// successive difference / 0.6745 / sqrt 2) over the median step. 0 below 2 steps a round.
double step_jitter_of(const std::vector<double>& seconds, int64_t per_round);

// Activates the class, measures, writes c.out (atomically) when set and returns the profile.
DeviceProfile profile_run(const ProfileConfig& c);

// The command line of `qsync-worker profile` (the arguments after "profile"); bad or missing
// flags throw std::invalid_argument naming the flag and the usage.
extern const char* const PROFILE_USAGE;
ProfileConfig profile_parse_args(int argc, char** argv);

// A table: per GEMM layer, forward+backward ms at each precision and saved MiB; other layers;
// casts; optimizer; static bytes.
std::string profile_summary(const DeviceProfile& p);

}  // namespace qsync
