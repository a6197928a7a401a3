// File: worker/loss_scale.cpp
// The dynamic loss-scale schedule (see loss_scale.h).
#include "worker/loss_scale.h"

namespace qsync {

void LossScaler::update(bool skipped) {
  if (!enabled()) return;
  if (skipped) {
    state_.scale = state_.scale * BACKOFF < 1.0 ? 1.0 : state_.scale * BACKOFF;
    state_.clean_steps = 0;
    return;
  }
  if (++state_.clean_steps >= GROWTH_INTERVAL) {
    state_.scale = state_.scale * GROWTH > 16777216.0 * 65536.0 ? state_.scale : state_.scale * GROWTH;  // <= 2^40
    state_.clean_steps = 0;
  }
}

const char* loss_scaling_name(LossScaling m) { return m == LossScaling::DYNAMIC ? "dynamic" : "none"; }

}  // namespace qsync
