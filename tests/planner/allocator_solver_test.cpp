// File: tests/planner/allocator_solver_test.cpp
// Tests of planner/allocator_solver.h on hand-computed chains: an earlier gradient bucket's
// deadline that the whole-pass deadline alone would miss (the slack dimension), a memory budget
// that changes the answer, deadlines folded into the whole pass when only fixed leaves precede
// them, infeasibility, a known plan (upper bound) that nothing beats, and the work limit.
#include "planner/allocator_solver.h"

#include <gtest/gtest.h>

namespace qsync {
namespace {

// Leaf 0 holds slot A, leaf 1 slot B. A: a0 (f 1, b 2, value 0) or a1 (f 0.5, b 1, value 1).
// B: b0 (f 1, b 4, value 0) or b1 (f 1, b 1, value 2). Whole pass (leaf 0) by 10; leaf 1's
// backward (B's gradients: an earlier bucket) by 5.5, i.e. F + b_B <= 5.5:
//   (a0, b0): F 2 + 4 = 6 > 5.5, although its whole pass (8) fits;
//   (a1, b0): 1.5 + 4 = 5.5, whole pass 6.5: value 1, the optimum;  (a0, b1): 3, value 2.
ChainProblem two_slots() {
  ChainProblem pb;
  pb.leaves.resize(2);
  pb.leaves[0].deadline = 10;
  pb.leaves[1].deadline = 5.5;
  pb.slots.push_back({0, {{1, 2, 10, 0}, {0.5, 1, 100, 1}}});
  pb.slots.push_back({1, {{1, 4, 10, 0}, {1, 1, 10, 2}}});
  return pb;
}

TEST(ChainSolver, AnEarlierBucketsDeadlineNeedsTheSlackDimension) {
  const ChainResult r = solve_chain(two_slots());
  ASSERT_TRUE(r.feasible);
  EXPECT_TRUE(r.two_time_dimensions);
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(r.value, 1);
  EXPECT_EQ(r.memory, 110);
  // Without the earlier deadline the free plan is best.
  ChainProblem whole = two_slots();
  whole.leaves[1].deadline = std::numeric_limits<double>::infinity();
  const ChainResult w = solve_chain(whole);
  EXPECT_FALSE(w.two_time_dimensions);
  EXPECT_EQ(w.choice, (std::vector<int>{0, 0}));
}

TEST(ChainSolver, MemoryBudgetChangesTheAnswer) {
  ChainProblem pb = two_slots();
  pb.memory_budget = 105;  // (a1, b0) needs 110
  const ChainResult r = solve_chain(pb);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.choice, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(r.value, 2);
  EXPECT_EQ(r.memory, 20);
  pb.memory_budget = 19;  // below the least memory
  EXPECT_FALSE(solve_chain(pb).feasible);
}

TEST(ChainSolver, DeadlinesAfterOnlyFixedLeavesFoldIntoTheWholePass) {
  // A fixed leaf 0 (f 0.5, b 0.5) before the slots: a deadline on leaf 1 (the first slot's) is
  // a whole-pass bound: T - 0.5 <= 8.2, T = 1 + slots' time. Slots A (leaf 1), B (leaf 2).
  ChainProblem pb;
  pb.leaves.resize(3);
  pb.leaves[0] = {0.5, 0.5, 0, 100};
  pb.leaves[1].deadline = 8.2;
  pb.slots.push_back({1, {{1, 2, 0, 0}, {0.5, 1, 0, 1}}});
  pb.slots.push_back({2, {{1, 4, 0, 0}, {1, 1, 0, 2}}});
  const ChainResult r = solve_chain(pb);
  ASSERT_TRUE(r.feasible);
  EXPECT_FALSE(r.two_time_dimensions);
  // (a0, b0): T = 1 + 8 = 9, 9 - 0.5 = 8.5 > 8.2; (a1, b0): 7.5 - 0.5 = 7 fits, value 1.
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  pb.leaves[1].deadline = 2;  // even the fastest plan (T 4.5, 4 less the fixed backward) cannot
  EXPECT_FALSE(solve_chain(pb).feasible);
}

TEST(ChainSolver, AKnownPlanThatNothingBeatsLeavesNoResult) {
  ChainProblem pb = two_slots();
  pb.upper_bound = 0.5;  // a plan of value 0.5 is known: nothing here beats it
  EXPECT_FALSE(solve_chain(pb).feasible);
  pb.upper_bound = 1;  // ties are kept
  EXPECT_DOUBLE_EQ(solve_chain(pb).value, 1);
}

TEST(ChainSolver, AWorkLimitReturnsTheKnownPlanUncertified) {
  ChainProblem pb = two_slots();
  pb.max_states = 1;
  const ChainResult r = solve_chain(pb);
  EXPECT_TRUE(r.gave_up);
  ASSERT_TRUE(r.feasible);  // the local search's plan, which meets every deadline
  EXPECT_GE(r.value, 1);
}

TEST(ChainSolver, DefaultBins) {
  EXPECT_EQ(chain_default_bins(1), 2000);
  EXPECT_EQ(chain_default_bins(100), 20000);
  EXPECT_EQ(chain_default_bins(10000), 100000);
}

}  // namespace
}  // namespace qsync
