// File: worker/optimizer.cpp
// SGD and AdamW updates (PyTorch's formulas), schedule and clipping.
#include "worker/optimizer.h"

#include <cmath>
#include <stdexcept>

namespace qsync {

OptimizerKind optimizer_kind_from_name(const std::string& name) {
  if (name == "sgd") return OptimizerKind::SGD;
  if (name == "adamw") return OptimizerKind::ADAMW;
  throw std::invalid_argument("unknown optimizer '" + name + "'; known: sgd, adamw");
}
const char* optimizer_kind_name(OptimizerKind k) { return k == OptimizerKind::SGD ? "sgd" : "adamw"; }

LrSchedule lr_schedule_from_name(const std::string& name) {
  if (name == "constant") return LrSchedule::CONSTANT;
  if (name == "cosine") return LrSchedule::COSINE;
  throw std::invalid_argument("unknown learning-rate schedule '" + name + "'; known: constant, cosine");
}
const char* lr_schedule_name(LrSchedule s) { return s == LrSchedule::CONSTANT ? "constant" : "cosine"; }

Optimizer::Optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& params, MemoryAccount* memory,
                     DeviceOps* ops)
    : config_(config), params_(params), ops_(ops != nullptr ? ops : &cpu_ops()) {
  if (config.lr <= 0) throw std::invalid_argument("learning rate must be positive, got " + std::to_string(config.lr));
  for (Parameter* p : params_) {
    m_.push_back(ops_->zeros({p->value.numel()}, Precision::FP32, memory, p->name + " optimizer state"));
    if (config.kind == OptimizerKind::ADAMW)
      v_.push_back(ops_->zeros({p->value.numel()}, Precision::FP32, memory, p->name + " optimizer state"));
  }
  for (size_t i = 0; i < params_.size(); ++i)
    slots_.push_back(
        {&params_[i]->value, &params_[i]->grad, &m_[i], v_.empty() ? nullptr : &v_[i], params_[i]->decay, params_[i], memory});
}

double Optimizer::lr_at(int64_t step) const {
  const double lr = config_.lr;
  if (step < config_.warmup_steps) return lr * double(step + 1) / double(config_.warmup_steps);
  if (config_.schedule == LrSchedule::CONSTANT || config_.total_steps <= config_.warmup_steps) return lr;
  const double progress =
      std::min(1.0, double(step - config_.warmup_steps) / double(config_.total_steps - config_.warmup_steps));
  const double floor = lr * config_.min_lr_ratio;
  return floor + (lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::vector<Tensor*> Optimizer::state() {
  std::vector<Tensor*> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back(&m_[i]);
    if (!v_.empty()) out.push_back(&v_[i]);
  }
  return out;
}

void Optimizer::step(int64_t step, float inv_loss_scale, bool skip_nonfinite) {
  settle();  // the previous step's (its result was read at the step's synchronize)
  ++updates_;
  OptimizerUpdate u;
  u.adamw = config_.kind == OptimizerKind::ADAMW;
  u.lr = float(lr_at(step));
  u.weight_decay = float(config_.weight_decay);
  u.momentum = float(config_.momentum);
  u.first_update = updates_ == 1;
  u.beta1 = float(config_.beta1);
  u.beta2 = float(config_.beta2);
  u.eps = float(config_.eps);
  u.bias_correction1 = float(1.0 - std::pow(config_.beta1, double(updates_)));
  u.bias_correction2 = float(1.0 - std::pow(config_.beta2, double(updates_)));
  u.grad_clip = config_.grad_clip;
  u.inv_loss_scale = inv_loss_scale;
  u.skip_nonfinite = skip_nonfinite;
  u.step = step;
  result_ = {};
  ops_->optimizer_step(slots_, u, &result_);
  settled_ = false;
}

void Optimizer::settle() {
  if (settled_) return;
  settled_ = true;
  if (result_.skipped) --updates_;  // a skipped step did not happen (Adam's bias correction)
}

}  // namespace qsync
