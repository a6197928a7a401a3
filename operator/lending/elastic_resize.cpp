// File: operator/lending/elastic_resize.cpp
// The elastic resize decision (see elastic_resize.h).
#include "operator/lending/elastic_resize.h"

#include <algorithm>

namespace qsync::lending {
namespace {

std::string slots_text(const std::vector<RankSlot>& slots) {
  std::string s;
  for (const RankSlot& r : slots) s += (s.empty() ? "" : ", ") + r.entry + "@" + r.node;
  return s.empty() ? "none" : s;
}

}  // namespace

bool growth_pays(double current_step_seconds, double offered_step_seconds, double min_gain) {
  if (current_step_seconds <= 0 || min_gain <= -1) return true;
  return offered_step_seconds > 0 && offered_step_seconds <= current_step_seconds * (1 - min_gain);
}

const char* resize_action_name(ResizeAction a) {
  switch (a) {
    case ResizeAction::NONE: return "none";
    case ResizeAction::REPLAN: return "replan";
    case ResizeAction::RESIZE: return "resize";
    case ResizeAction::WAIT: return "wait";
  }
  return "none";
}

ResizeDecision decide_resize(const ResizeInputs& in) {
  ResizeDecision d;
  d.from_ranks = int64_t(in.current.size());
  d.to_ranks = int64_t(in.offered.size());
  if (d.to_ranks < in.min_ranks) {
    d.action = ResizeAction::WAIT;
    d.reason = "BelowMinRanks";
    d.message = "the pool offers " + std::to_string(d.to_ranks) + " ranks, fewer than spec.elasticPolicy.minRanks " +
                std::to_string(in.min_ranks) + ": the job waits for nodes (the workers stop after a checkpoint)";
    return d;
  }
  std::vector<RankSlot> current = in.current, offered = in.offered;
  std::sort(current.begin(), current.end());
  std::sort(offered.begin(), offered.end());
  if (current.empty()) {
    d.action = ResizeAction::REPLAN;
    return d;
  }
  if (current == offered) return d;
  if (!in.current_has_pods) {
    d.action = ResizeAction::REPLAN;
    d.reason = "PoolChanged";
    return d;
  }
  std::vector<RankSlot> lost, gained;
  std::set_difference(current.begin(), current.end(), offered.begin(), offered.end(), std::back_inserter(lost));
  std::set_difference(offered.begin(), offered.end(), current.begin(), current.end(), std::back_inserter(gained));
  if (!lost.empty()) {
    d.action = ResizeAction::RESIZE;
    d.reason = "PoolShrank";
    d.message = "the pool lost " + slots_text(lost) + (gained.empty() ? "" : " and offers " + slots_text(gained)) + ": " +
                std::to_string(d.from_ranks) + " -> " + std::to_string(d.to_ranks) + " ranks from the last checkpoint";
    return d;
  }
  const double waited = in.now - in.last_resize;
  if (in.last_resize > 0 && waited < in.grow_cooldown_seconds) {
    d.message = "the pool offers " + slots_text(gained) + "; growing waits " +
                std::to_string(int64_t(in.grow_cooldown_seconds - waited)) + " s more (growCooldownSeconds)";
    return d;
  }
  d.action = ResizeAction::RESIZE;
  d.reason = "PoolGrew";
  d.message = "the pool offers " + slots_text(gained) + ": " + std::to_string(d.from_ranks) + " -> " +
              std::to_string(d.to_ranks) + " ranks from the last checkpoint";
  return d;
}

}  // namespace qsync::lending
