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

Optimizer::Optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& params, MemoryAccount* memory)
    : config_(config), params_(params) {
  if (config.lr <= 0) throw std::invalid_argument("learning rate must be positive, got " + std::to_string(config.lr));
  for (Parameter* p : params_) {
    m_.push_back(Tensor::zeros({p->value.numel()}, Precision::FP32, memory, p->name + " optimizer state"));
    if (config.kind == OptimizerKind::ADAMW)
      v_.push_back(Tensor::zeros({p->value.numel()}, Precision::FP32, memory, p->name + " optimizer state"));
  }
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

double Optimizer::step(int64_t step) {
  double norm = 0.0;
  if (config_.grad_clip > 0) {
    double sq = 0.0;  // fixed order, double accumulation: identical on every rank
    for (Parameter* p : params_) {
      const float* g = p->grad.f32();
      for (int64_t i = 0; i < p->grad.numel(); ++i) sq += double(g[i]) * double(g[i]);
    }
    norm = std::sqrt(sq);
  }
  const float clip = config_.grad_clip > 0 && norm > config_.grad_clip ? float(config_.grad_clip / (norm + 1e-6)) : 1.0f;
  const float lr = float(lr_at(step));
  const float wd = float(config_.weight_decay);
  ++updates_;
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    Parameter* p = params_[pi];
    float* w = p->value.f32();
    const float* g = p->grad.f32();
    float* m = m_[pi].f32();
    const int64_t n = p->value.numel();
    const float decay = p->decay ? wd : 0.0f;
    if (config_.kind == OptimizerKind::SGD) {
      const float mom = float(config_.momentum);
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] * clip + decay * w[i];
        m[i] = updates_ == 1 ? gi : mom * m[i] + gi;
        w[i] -= lr * m[i];
      }
    } else {
      float* v = v_[pi].f32();
      const float b1 = float(config_.beta1), b2 = float(config_.beta2), eps = float(config_.eps);
      const float c1 = float(1.0 - std::pow(config_.beta1, double(updates_)));
      const float c2 = float(1.0 - std::pow(config_.beta2, double(updates_)));
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] * clip;
        w[i] -= lr * decay * w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
  }
  return norm;
}

}  // namespace qsync
