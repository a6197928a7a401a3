// File: operator/lending/elastic_resize.h
// When an elastic job changes its world size: a pure function of the ranks its current plan
// placed, the ranks the pool offers now, whether the current attempt's pods exist, the bounds
// and the clock. A rank is a slot: (pool kind, entry, node, device class, GPUs).
//   below minRanks                     -> WAIT (the workers stop after a checkpoint; the job
//                                         waits for the pool to come back)
//   no plan yet, or no pods yet         -> REPLAN (plan for the pool as it is; nothing to stop)
//   the same slots                      -> NONE
//   a planned slot is gone              -> RESIZE now (a reclaim, a lost node: shrink at once)
//   only new slots                      -> RESIZE once growCooldownSeconds passed since the
//                                         last resize (each resize costs a restart), else NONE
// A RESIZE checkpoints (the workers stop on SIGTERM at one agreed step), re-plans for the new
// slots and restarts every rank from that checkpoint at the new world size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync::lending {

struct RankSlot {
  std::string pool_kind, entry, node, device_class;
  int64_t gpus = 0;
  auto operator<=>(const RankSlot&) const = default;
};

enum class ResizeAction { NONE, REPLAN, RESIZE, WAIT };

struct ResizeInputs {
  std::vector<RankSlot> current;  // the current plan's placement (empty: not planned)
  bool current_has_pods = false;  // pods of the current attempt exist
  std::vector<RankSlot> offered;  // what the pool offers now (at most maxRanks)
  int64_t min_ranks = 1;
  double now = 0;
  double last_resize = 0;  // 0: never resized
  double grow_cooldown_seconds = 300;
};

struct ResizeDecision {
  ResizeAction action = ResizeAction::NONE;
  std::string reason;   // PoolShrank, PoolGrew, PoolChanged, BelowMinRanks ("" for NONE/REPLAN)
  std::string message;
  int64_t from_ranks = 0, to_ranks = 0;
};

ResizeDecision decide_resize(const ResizeInputs& inputs);

// Whether a growth is worth its restart: the offered pool's predicted step must be at least
// `min_gain` shorter than the current one's (the global batch is fixed, so throughput is
// 1 / step). A current step of 0 (nothing planned) always pays; a negative min_gain accepts a
// slower pool (-1: any).
bool growth_pays(double current_step_seconds, double offered_step_seconds, double min_gain);

const char* resize_action_name(ResizeAction a);

}  // namespace qsync::lending
