// File: worker/layer.h
// The layer interface of the training engine. Each layer's forward sits next to its backward
// (one .cpp per layer under worker/layers/); shapes are batch first, FP32 between layers.
// Layers are built from the model description (planner/model_desc.h) by layer_create().
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "worker/ops/device_ops.h"
#include "worker/tensor.h"

namespace qsync {

struct Parameter {
  std::string name;  // "<layer>.weight", "<layer>.bias", ...
  Tensor value;      // FP32 master weights
  Tensor grad;       // FP32, accumulated by backward, zeroed by the optimizer step
  bool decay = true; // weight decay applies (not to biases and norm gains)
  // The forward's per-row INT8 copy of value made ahead, in the optimizer step's pass over value
  // (where the device does: DeviceOps::optimizer_makes_int8_rows), so the next forward does not
  // read the weights again to cast them (worker/precision_ops.h, cast_parameter).
  // int8_rows_qmax > 0 asks for it (the layer's training forward sets it: its INT8 range, 0 when
  // it casts otherwise); int8_rows_step is the one training step whose forward may take it (the
  // updating step + 1). A forward at any other step casts value itself, and its cast becomes the
  // buffer (step -1: for no forward) that the optimizer rewrites in place once the layer's
  // backward has let go of it: one buffer per weight, accounted like the optimizer's state.
  int int8_rows_qmax = 0;
  Tensor int8_rows;  // (rows, cols) INT8, per-row scales; undefined until made
  int64_t int8_rows_step = -1;
  // The largest |value| of the value the copy was made from (the largest of its rows'), for the
  // same step: int8-all's backward re-quantizes the weight per tensor for dX = dY W and takes
  // it instead of reading the weights for it (precision_ops.h, backward_weight). -1: none.
  float int8_rows_amax = -1.0f;
};

// Optional timing of each op of a step (layer forward/backward, casts), for profiling.
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual void record(const std::string& op, double seconds) = 0;
};

class Layer;

// Told when a leaf layer's backward has finished, i.e. its parameter gradients are final for the
// step (gradient buckets start their all-reduce from here).
class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  virtual void layer_backward_done(Layer& layer) = 0;
};

// Sees the operands of every GEMM-like layer (Linear, Conv2d, attention's projections), for
// calibration statistics (worker/calibration.h). forward: x the layer's FP32 input as it arrived
// (Conv2d: the image, before im2col), w the FP32 master weight. backward: dy the FP32 output
// gradient, dw the weight gradient accumulated so far (this step's when the gradients were zeroed).
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void gemm_forward(const Layer& layer, const Tensor& x, const Tensor& w) = 0;
  virtual void gemm_backward(const Layer& layer, const Tensor& dy, const Tensor& dw) = 0;
};

// What every layer sees during a step.
struct StepContext {
  // The rank's ops (its device): CpuOps when nullptr. Layers allocate and compute through them.
  DeviceOps* ops = nullptr;
  MemoryAccount* memory = nullptr;
  uint64_t seed = 0;     // run seed: dropout masks and stochastic rounding derive from (seed, step, layer)
  int64_t step = 0;
  bool training = true;  // false: eval (no dropout, nothing saved for backward)
  Precision sixteen_bit = Precision::BF16;  // the device's 16-bit format for int8 backward GEMMs
  // false: the device has no 16-bit GEMM; int8 backward operands are FP32 tensors holding values
  // rounded to `sixteen_bit` ("emulated": the 16-bit numerics at FP32 GEMM speed).
  bool sixteen_bit_native = true;
  OpTimer* timer = nullptr;
  BackwardListener* backward_listener = nullptr;
  LayerObserver* observer = nullptr;  // calibration only
};

// The ops every layer of this step calls.
inline DeviceOps& ops_of(const StepContext& ctx) { return ctx.ops != nullptr ? *ctx.ops : cpu_ops(); }

// The seconds of a scope recorded under `name` ("<layer>.<op>") when ctx has a timer, on the
// timeline of the rank's ops (host clock, or CUDA events recorded on the compute stream).
class OpClock {
 public:
  OpClock(StepContext& ctx, std::string name) : ctx_(ctx), name_(std::move(name)) {
    if (ctx_.timer != nullptr) start_ = ops_of(ctx_).time_mark();
  }
  ~OpClock() {
    if (ctx_.timer != nullptr) ops_of(ctx_).record_time(*ctx_.timer, name_, start_, ops_of(ctx_).time_mark());
  }
  OpClock(const OpClock&) = delete;
  OpClock& operator=(const OpClock&) = delete;

 private:
  StepContext& ctx_;
  std::string name_;
  TimeMark start_;
};

// Statistics a layer keeps across steps besides its parameters (BatchNorm's running mean and
// variance, PyTorch's "buffers"): model state that checkpoints save and that data parallelism keeps
// equal on every rank (worker/dist/running_stats_sync.h: after each step, the step's update is
// redone from the sums over every rank's batch, so the statistics are those of the global batch).
class RunningStatistics {
 public:
  struct Buffer {
    std::string name;            // "<layer>.running_mean"
    std::vector<float>* values;  // owned by the layer
  };
  virtual ~RunningStatistics() = default;
  virtual std::vector<Buffer> buffers() = 0;
  // The sums over this rank's batch of the last training forward since the last update_from_sums
  // (zeros when there was none): batch_sums_size() doubles, a count fixed by the model.
  virtual int64_t batch_sums_size() const = 0;
  virtual void batch_sums(double* out) const = 0;
  // Redoes that forward's update of the statistics from the sums over every rank's batch.
  virtual void update_from_sums(const double* sums) = 0;
};

class Layer {
 public:
  explicit Layer(const LayerDesc& desc) : desc_(desc) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerDesc& desc() const { return desc_; }
  const std::string& name() const { return desc_.name; }

  // x: (B, in_shape...) FP32. In training, keeps what backward needs (in the layer's compute
  // precision). Returns (B, out_shape...) FP32.
  virtual Tensor forward(const Tensor& x, StepContext& ctx) = 0;
  // dy: (B, out_shape...) FP32. Accumulates parameter gradients, returns dx (B, in_shape...),
  // and frees what forward saved.
  virtual Tensor backward(const Tensor& dy, StepContext& ctx) = 0;

  virtual void collect_parameters(std::vector<Parameter*>& out) { (void)out; }
  // Deterministic initialization from `rng` (PyTorch-style defaults).
  virtual void init_parameters(std::mt19937_64& rng) { (void)rng; }
  // After the model placed its parameters in the flat buffers: a layer whose parameters are other
  // layers' (tied weights, GraphLayer) points those at the owners' values and gradients. Only the
  // root layer is asked (an ONNX model's root is its graph).
  virtual void share_parameters() {}
  // GEMM-like layers take their precision from the plan; containers recurse.
  virtual void apply_plan(const RankPlan& plan) { (void)plan; }
  // Bytes currently held for backward (the saved activations).
  virtual int64_t saved_bytes() const { return 0; }
  // The layer's running statistics (nullptr: none). Containers do not forward their children's:
  // Model::visit_layers reaches every layer.
  virtual RunningStatistics* running_statistics() { return nullptr; }

  // Whether backward must return dx. The model's input needs none (it is data), so the layers
  // before the first one with parameters are skipped and that one returns an undefined tensor
  // instead of computing its input gradient (a CNN's first convolution, an MLP's first GEMM).
  // Containers pass it on to their children.
  virtual void set_input_gradient_needed(bool needed) { input_gradient_needed_ = needed; }
  bool input_gradient_needed() const { return input_gradient_needed_; }

 protected:
  LayerDesc desc_;
  bool input_gradient_needed_ = true;
};

// Builds the layer (and its children) described by `d`. Throws std::invalid_argument for a kind
// the engine does not implement.
std::unique_ptr<Layer> layer_create(const LayerDesc& d, MemoryAccount* memory);

}  // namespace qsync
