// File: planner/allocator_solver.h
// The exact allocator's core: one rank's plan as a dynamic program over its leaf layers.
//
// The problem. A rank runs leaves 0..n-1 forward, then backward n-1..0. Leaf j has fixed
// forward/backward seconds and bytes (non-GEMM work) plus GEMM slots, each with options
// (forward, backward, bytes, value). Choose one option per slot to
//   minimize   the sum of values
//   subject to every leaf j with a deadline: its backward ends by it, i.e.
//                F + B_suffix(j) <= deadline(j)   (F: all forward seconds; B_suffix(j): the
//                backward seconds of leaves >= j; leaf 0's deadline bounds the whole pass)
//              the sum of bytes <= memory_budget.
// The allocator sets leaf 0's deadline to target - optimizer and, for each gradient bucket, the
// deadline of its first leaf to target - (its all-reduce and every later one) - the slowest
// optimizer: exactly "this rank's step bound <= target" (allocator_model.h).
//
// The DP runs over the leaves in backward order. A state is a partial plan of the leaves >= j:
// R = their forward + backward seconds, s = how much forward time the leaves < j may still take
// (min over deadlines passed of deadline - R at that leaf, minus the forward seconds since; +inf
// before the first), memory, value. Deadlines only shift whole-pass time when every leaf before
// them is fixed; those (and deadlines implied by the whole-pass one) fold into leaf 0's, and
// when no other remains, s is not needed (one time dimension).
//
// Pruning: a state is dropped when it cannot meet a deadline even with the fastest remaining
// choices; when another state has R in a lower-or-equal bin, s >=, memory <= and value <=
// (bins: d = E / bins, E = leaf 0's deadline minus the fastest plan's whole pass); and when it
// cannot beat a known plan (allocator_dual.cpp: Lagrangian bounds on the remaining slots, and
// options fixed out up front by their reduced costs; the known plan is the caller's
// `upper_bound` or a local search's). s, memory and values are exact, so every returned plan is
// feasible. Optimality gap: a dropped state's stand-in is at most d slower per slot, so after m
// slots the returned value is at most the optimum under every deadline tightened by
// m * d = (m / bins) * E (the bound tests allow the stand-in that drift, so they keep this).
// With bins = 200 m that is 0.5 % of the slack above the fastest plan. Memory has no gap.
// Result: feasible = false when no plan meets the deadlines and memory, or when none beats the
// caller's upper_bound (whose plan is then optimal within the gap). A pass that would keep more
// than max_states states stops (gave_up): the best known plan is returned, uncertified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace qsync {

struct ChainOption {
  double forward = 0, backward = 0;
  int64_t memory = 0;
  double value = 0;
};

struct ChainSlot {
  size_t leaf = 0;                   // the leaf it runs in
  std::vector<ChainOption> options;  // at least one
};

struct ChainLeaf {
  double forward = 0, backward = 0;  // fixed work
  int64_t memory = 0;                // fixed bytes
  double deadline = std::numeric_limits<double>::infinity();  // when its backward must end
};

struct ChainProblem {
  std::vector<ChainLeaf> leaves;
  std::vector<ChainSlot> slots;  // in forward order
  int64_t memory_budget = -1;    // < 0: unlimited
  int bins = 0;                  // 0: chain_default_bins(slots)
  double upper_bound = std::numeric_limits<double>::infinity();  // a known feasible plan's value
  int64_t max_states = 4'000'000;  // work limit of one DP pass (about a second or two)
};

struct ChainResult {
  bool feasible = false;
  std::vector<int> choice;  // option per slot
  double value = 0;
  int64_t memory = 0;
  int64_t states = 0;            // states kept over all slots (the work done)
  bool two_time_dimensions = false;  // whether an earlier deadline needed the slack dimension
  bool gave_up = false;  // a pass hit max_states: the result is the known plan (if any), not certified
};

ChainResult solve_chain(const ChainProblem& problem);

// The default bin count for m slots: 200 m (gap 0.5 % of the slack), at least 2000, at most 100000.
int chain_default_bins(std::size_t slots);

}  // namespace qsync
