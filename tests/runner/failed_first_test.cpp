// File: tests/runner/failed_first_test.cpp
// Which rank `qsync run` names as the one that failed first (runner/local_runner.h): the first
// reaped rank that failed on its own, not one that only lost a peer in a collective
// (WORKER_EXIT_COLLECTIVE_FAILED) or that the runner killed past the collective timeout.
#include <gtest/gtest.h>

#include <csignal>

#include "planner/worker_command.h"
#include "runner/local_runner.h"

namespace qsync {
namespace {

constexpr int kCollective = WORKER_EXIT_COLLECTIVE_FAILED;

TEST(RankThatFailedFirst, NoFailureIsMinusOne) { EXPECT_EQ(rank_that_failed_first({}), -1); }

TEST(RankThatFailedFirst, OwnErrorWinsOverAPeerReapedEarlier) {
  // Rank 0's disk filled; rank 1 lost it in the all-reduce and exited first (the CI flake).
  EXPECT_EQ(rank_that_failed_first({{1, kCollective, false}, {0, 1, false}}), 0);
}

TEST(RankThatFailedFirst, ASignalledDeathIsACause) {
  EXPECT_EQ(rank_that_failed_first({{0, kCollective, false}, {1, 128 + SIGKILL, false}}), 1);
}

TEST(RankThatFailedFirst, ARankTheRunnerKilledIsNot) {
  // Rank 1 stopped (SIGSTOP): rank 0 timed out in its collective, the runner killed rank 1.
  EXPECT_EQ(rank_that_failed_first({{0, kCollective, false}, {1, 128 + SIGKILL, true}}), 0);
}

TEST(RankThatFailedFirst, OnlyCollectiveFailuresNameTheFirstReaped) {
  EXPECT_EQ(rank_that_failed_first({{2, kCollective, false}, {0, kCollective, false}}), 2);
}

TEST(RankThatFailedFirst, AmongOwnErrorsTheFirstReaped) {
  EXPECT_EQ(rank_that_failed_first({{3, 1, false}, {1, 1, false}}), 3);
}

}  // namespace
}  // namespace qsync
