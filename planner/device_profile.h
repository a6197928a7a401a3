// File: planner/device_profile.h
// Device profiles: what one device class costs for one model at one local batch, measured by
// `qsync-worker profile` (or estimated for GPU classes that cannot be measured here), and the
// communication profile of the all-reduce. Versioned JSON, keyed by model (name + hash), device
// class and batch. A measured profile always wins over an estimate.
//
// Per GEMM layer and layer precision: forward and backward seconds (the GEMMs and the layer's own
// casts of weights and saved tensors), saved activation bytes and weight-copy bytes. Per other
// (non-GEMM) layer: forward/backward seconds and saved bytes at FP32 (they always run in FP32).
// Casts between neighbouring precisions (the input cast of a GEMM layer whose input arrives in
// FP32): seconds = a * numel + b per (from, to) storage precision. Optimizer step seconds.
//
// Times scale linearly with the local batch for the replayer's batch moves:
//   t(batch) = t(profile batch) * batch / profile batch  (documented approximation)
//
// Which costs include which casts (so that nothing is counted twice):
//   * A GEMM layer's forward_seconds include its own casts: the input cast (FP32 -> its forward
//     precision, "cast_x") and the weight cast ("cast_w"; where the optimizer step makes the
//     INT8 weight copy instead, the layer's share of what that adds to the step). Its backward_seconds include the
//     output-gradient cast ("cast_dy"), the casts of the saved operands for the backward GEMMs
//     ("cast_saved_x", "cast_saved_w", "cast_w_backward") and both backward GEMMs. This is how
//     the worker runs: layers exchange FP32 tensors and every GEMM layer casts for itself.
//   * `casts` (and `channel_casts`) are NOT part of any layer's cost: they price one cast alone,
//     for the planner's explanations ("conv2 int8 spends 0.3 ms quantizing its input") and for
//     neighbour-aware extensions that would pass low-precision tensors between layers. A
//     replayer that follows the worker adds no cast on top of the layer costs.
//   * other_layers are FP32 costs of the non-GEMM leaves. An attention leaf's entry is its own
//     part (scores, softmax, heads): its qkv and proj projections are GEMM layers of their own.
//   * optimizer_seconds: one optimizer step over every parameter (precision independent: the
//     FP32 run's, making no INT8 weight copies).
// saved_bytes of a GEMM layer is its saved input (in the forward precision); weight_bytes the
// low-precision weight copy kept for backward (0 at fp32, where backward reads the master).
//
// Measured profile files are named "<model>.<class>.b<batch>.profile.json" and written by
//   qsync-worker profile --model M --device-class C --batch B --out FILE
// communication profiles "comm<anything>.json" (bench: qsync-bench-allreduce --comm-profile FILE).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/precision.h"
#include "planner/layer_precision.h"
#include "planner/model_desc.h"

namespace qsync {

inline constexpr int DEVICE_PROFILE_VERSION = 1;

struct LayerCost {
  double forward_seconds = 0;
  double backward_seconds = 0;
  int64_t saved_bytes = 0;   // activations kept for backward, at the profile batch
  int64_t weight_bytes = 0;  // the low-precision weight copy kept for backward (0 for fp32)
};

struct LinearCost {  // seconds = a * numel + b
  double a = 0, b = 0;
  double at(int64_t numel) const { return a * double(numel) + b; }
};

struct DeviceProfile {
  int version = DEVICE_PROFILE_VERSION;
  std::string model;
  uint64_t model_hash = 0;
  std::string device_class;
  int64_t batch = 0;         // the local batch it was measured at
  bool estimated = false;    // derived from public peak figures, not measured
  std::string source;        // "measured on <cpu>" / "estimated from <figures>"
  // GEMM layer name -> precision -> cost (only the precisions the class supports).
  std::map<std::string, std::map<LayerPrecision, LayerCost>> gemm_layers;
  // Other leaf layers -> FP32 cost.
  std::map<std::string, LayerCost> other_layers;
  // Cast from one storage precision to another (e.g. FP32 -> INT8 quantize): a * numel + b.
  // (FP32, INT8) is the per-tensor quantization of activations; (INT8, BF16|FP16) the
  // dequantization of a saved INT8 tensor to the device's 16-bit format for backward (on classes
  // without native 16-bit GEMMs the result is FP32 storage holding 16-bit values). (FP32, FP32)
  // is a plain copy: the gradient copies into and out of the all-reduce buckets (absent in
  // profiles older than it: those copies then cost nothing).
  std::map<std::pair<Precision, Precision>, LinearCost> casts;
  // FP32 -> INT8 with one scale per output channel (the weight cast of int8 layers).
  std::map<std::pair<Precision, Precision>, LinearCost> channel_casts;
  double optimizer_seconds = 0;
  int64_t static_bytes = 0;  // parameters, gradients and optimizer state (FP32)
  // What a whole measured FP32 step costs beyond its layers, casts and optimizer: zeroing the
  // gradients, the loss and its gradient, the per-step bookkeeping (time), and the input batch,
  // logits and loss buffers (bytes). The profiler measures it as the median FP32 step minus the
  // replayer's prediction of that step from the rest of the profile; it scales with the batch.
  double step_overhead_seconds = 0;
  int64_t step_overhead_bytes = 0;
  // How much a whole step varies from one step to the next: the standard deviation of the FP32
  // step over its median, from successive differences within a round (slow drift left out). A
  // synchronous job waits for the slowest rank of every step, so this spread lengthens the step
  // of a balanced pool (planner/replayer.h). 0: unknown (estimates, older profiles).
  double step_jitter = 0;
  // Measured in a world of world_size ranks (0: alone): its median whole FP32 step, every rank at
  // FP32, from the step's start to the end of its stats all-reduce (the waits included), at this
  // profile's batch; world_signature names that world as its launcher did (`qsync run`: every
  // rank's class@batch x threads, pinned or not). What the shared-CPU model is fitted on
  // (shared_cpus_fit, planner/shared_cpu_model.h). Not scaled with the batch.
  int world_size = 0;
  double world_step_seconds = 0;
  std::string world_signature;
  int64_t memory_bytes = 0;  // the device's memory (estimates); 0: unknown (CPU: the job's budget decides)

  // The precisions profiled for every GEMM layer (what this class can run).
  std::vector<LayerPrecision> precisions() const;
};

// All-reduce time = alpha + beta * bytes, for a world size, the ranks arriving together.
struct CommProfile {
  int version = DEVICE_PROFILE_VERSION;
  int world_size = 2;
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per byte
  // A small all-reduce on the last rank to arrive, its peers having idled in it (the step's stats
  // all-reduce: planner/replay_timeline.h); 0: not measured (alpha stands in).
  double late_sync_seconds = 0;
  // An all-reduce on the last rank to arrive when its peers came well before it: late_alpha +
  // late_beta * bytes. They have sent their first parts into the links meanwhile, so it takes
  // less than together (Gloo over loopback, 2 pinned ranks: 7.45 MB in 1.30 against 1.60 ms).
  // Both 0: not measured (seconds() stands in).
  double late_alpha = 0, late_beta = 0;
  bool estimated = false;
  std::string source;
  double seconds(int64_t bytes) const { return alpha + beta * double(bytes); }
  // On the last rank to arrive, its nearest peer `lead` seconds before it: seconds(bytes) for a
  // lead of 0, the late cost from a lead as long as seconds(bytes) on, linear between.
  double seconds_after(int64_t bytes, double lead) const {
    const double together = seconds(bytes);
    if ((late_alpha <= 0 && late_beta <= 0) || !(lead > 0) || !(together > 0)) return together;
    const double apart = std::min(together, late_alpha + late_beta * double(bytes));
    return lead >= together ? apart : together - (together - apart) * (lead / together);
  }
};

// JSON files; load checks version, and (when given) that the profile is for `model` and `batch`:
// a profile from another model or batch is refused with a message naming both.
DeviceProfile device_profile_load(const std::string& path);
void device_profile_write(const std::string& path, const DeviceProfile& p);  // atomic
void device_profile_check(const DeviceProfile& p, const ModelDesc& model, int64_t batch, const std::string& where);
CommProfile comm_profile_load(const std::string& path);
void comm_profile_write(const std::string& path, const CommProfile& p);  // atomic
// The JSON text of a communication profile (a ConfigMap's comm.json); `source_name` names it in errors.
CommProfile comm_profile_from_json(const std::string& text, const std::string& source_name);
// The JSON text of a profile, and back (`source_name` names it in errors).
std::string device_profile_to_json(const DeviceProfile& p);
DeviceProfile device_profile_from_json(const std::string& text, const std::string& source_name);
// "<model>.<class>.b<batch>.profile.json": the name ProfileStore's messages suggest.
std::string device_profile_file_name(const std::string& model, const std::string& device_class, int64_t batch);
// The command that measures a profile: `qsync-worker profile --model ... --out <out>`.
std::string device_profile_command(const ModelDesc& model, const std::string& device_class, int64_t batch,
                                   const std::string& out);

// Least-squares fit of seconds = a * numel + b (one point, or one size: b only). Costs are never
// negative: when the unconstrained fit gives b < 0 the best fit with b = 0 is returned, when it
// gives a < 0 the mean as b (a = 0). Throws std::invalid_argument on empty or unequal inputs.
LinearCost fit_linear_cost(const std::vector<int64_t>& numel, const std::vector<double>& seconds);
// The same line fitted to relative errors (least squares of (a x + b - t) / t): for sizes over
// several decades, where plain least squares fits the largest and leaves the intercept to the
// noise of big sizes (measured here: an all-reduce profile's alpha 826 us by plain least squares
// over 4 B to 16 MiB, where 4 B takes about 90 us). Negative coefficients are clamped as above.
LinearCost fit_linear_cost_relative(const std::vector<int64_t>& numel, const std::vector<double>& seconds);

// A directory of profiles: measured files (*.profile.json) and, for GPU classes, estimates built
// on demand. find() prefers a measured profile of (model, class, batch); otherwise a measured one
// of another batch scaled linearly; otherwise the estimate (GPU classes); else throws naming what
// is missing and how to measure it (`qsync-worker profile ...`).
class ProfileStore {
 public:
  explicit ProfileStore(const std::string& dir);  // "" = estimates only
  DeviceProfile find(const ModelDesc& model, const std::string& device_class, int64_t batch) const;
  CommProfile comm(int world_size) const;  // measured comm.json if present, else an estimate
  const std::vector<DeviceProfile>& measured() const { return measured_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<DeviceProfile> measured_;
  std::vector<CommProfile> comms_;
};

// Scales a profile's times and activation bytes to another local batch (linear model).
DeviceProfile device_profile_scaled(const DeviceProfile& p, int64_t batch);

// The GPU classes whose profiles are estimated from public peak throughput and bandwidth per
// precision ("t4", "a10", "l4", "v100", "a100", "h100", "h200": device class names
// "gpu-t4", ...), for a model and batch. estimated_gpu_classes() returns the class names
// ("gpu-t4", ...); device_profile_estimate accepts either spelling and throws
// std::invalid_argument naming the known classes for any other. The figures, their sources
// and the roofline are documented in planner/estimated_profiles.cpp.
std::vector<std::string> estimated_gpu_classes();
bool is_estimated_gpu_class(const std::string& device_class);
DeviceProfile device_profile_estimate(const ModelDesc& model, const std::string& gpu_class, int64_t batch);
// The datasheet's dense peak of a GPU class for GEMMs on operands of precision p, in TFLOP/s
// (TOPS for INT8); 0 when the class has no unit for it or is not an estimated GPU class.
double gpu_datasheet_peak_tflops(const std::string& gpu_class, Precision p);
// An estimated all-reduce (ring over a 10 Gbit/s network, documented in estimated_profiles.cpp),
// or a measured profile of another world size rescaled by the ring's step and traffic factors.
CommProfile comm_profile_estimate(int world_size);
CommProfile comm_profile_rescaled(const CommProfile& measured, int world_size);
// The all-reduce of `world_size` ranks from measured profiles: one of that world size, else the
// nearest measured world size (above 1) rescaled, else the estimate (ProfileStore::comm).
CommProfile comm_profile_for_world(const std::vector<CommProfile>& measured, int world_size);

}  // namespace qsync
