// File: worker/loss_scale.h
// Dynamic loss scaling, for layers whose backward runs in FP16 on a GPU (fp16 layers, and int8
// layers on GPUs without BF16: the T4): the loss gradient is multiplied by a power-of-two scale
// S so that small gradients survive FP16; the optimizer divides by S (exactly) and skips a step
// whose global gradient norm is not finite. PyTorch's GradScaler schedule:
//   S starts at 2^16; a skipped step halves it; 2000 steps in a row without one double it.
// The decision needs no extra collective: it is made on the summed gradients, which are the same
// on every rank, so every rank skips the same steps and keeps the same S. The state (S and the
// clean-step count) is saved in checkpoints, so a resumed run scales as the uninterrupted one.
#pragma once

#include <cstdint>
#include <string>

namespace qsync {

enum class LossScaling : uint8_t { NONE, DYNAMIC };

struct LossScaleState {
  double scale = 65536.0;
  int64_t clean_steps = 0;
};

class LossScaler {
 public:
  static constexpr double INITIAL = 65536.0, GROWTH = 2.0, BACKOFF = 0.5;
  static constexpr int64_t GROWTH_INTERVAL = 2000;

  explicit LossScaler(LossScaling mode = LossScaling::NONE) : mode_(mode) {}
  bool enabled() const { return mode_ == LossScaling::DYNAMIC; }
  float scale() const { return enabled() ? float(state_.scale) : 1.0f; }
  float inverse() const { return enabled() ? float(1.0 / state_.scale) : 1.0f; }
  // After the step's result is known: skipped halves the scale, a clean streak grows it.
  void update(bool skipped);
  const LossScaleState& state() const { return state_; }
  void set_state(const LossScaleState& s) { state_ = s; }

 private:
  LossScaling mode_;
  LossScaleState state_;
};

// "none" | "dynamic" (and "auto", resolved by the trainer from the plans of the job's ranks).
const char* loss_scaling_name(LossScaling m);

}  // namespace qsync
