// File: tests/operator/api/conditions_test.cpp
// Condition semantics: lastTransitionTime moves only on a status change, set_condition reports
// whether anything changed, Running and Restarting exclude each other, Succeeded/Failed finish.
#include "operator/api/conditions.h"

#include <gtest/gtest.h>

namespace qsync::api {
namespace {

const char* T0 = "2025-01-31T12:00:00Z";
const char* T1 = "2025-01-31T12:05:00Z";
const char* T2 = "2025-01-31T12:10:00Z";

TEST(Conditions, NewConditionIsAddedWithTheTime) {
  std::vector<Condition> conditions;
  EXPECT_TRUE(set_condition(conditions, CONDITION_CREATED, CONDITION_TRUE, "JobCreated", "created", 1, T0));
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0], (Condition{"Created", "True", "JobCreated", "created", T0, 1}));
}

TEST(Conditions, TransitionTimeMovesOnlyWhenTheStatusChanges) {
  std::vector<Condition> conditions;
  set_condition(conditions, CONDITION_PLANNED, CONDITION_FALSE, "Planning", "planning", 1, T0);
  // Same status, new reason/message/generation: those update, the time stays.
  EXPECT_TRUE(set_condition(conditions, CONDITION_PLANNED, CONDITION_FALSE, "WaitingForNodes", "0 of 2 nodes", 2, T1));
  EXPECT_EQ(conditions[0].last_transition_time, T0);
  EXPECT_EQ(conditions[0].reason, "WaitingForNodes");
  EXPECT_EQ(conditions[0].message, "0 of 2 nodes");
  EXPECT_EQ(conditions[0].observed_generation, 2);
  // Status change: the time moves.
  EXPECT_TRUE(set_condition(conditions, CONDITION_PLANNED, CONDITION_TRUE, "PlanReady", "2 ranks", 2, T2));
  EXPECT_EQ(conditions[0].last_transition_time, T2);
  EXPECT_EQ(conditions.size(), 1u);
}

TEST(Conditions, IdenticalSetReportsNoChange) {
  std::vector<Condition> conditions;
  set_condition(conditions, CONDITION_RUNNING, CONDITION_TRUE, "PodsRunning", "2/2", 1, T0);
  const std::vector<Condition> before = conditions;
  EXPECT_FALSE(set_condition(conditions, CONDITION_RUNNING, CONDITION_TRUE, "PodsRunning", "2/2", 1, T1));
  EXPECT_EQ(conditions, before);  // not even the time: a status write would be a no-op
}

TEST(Conditions, RunningAndRestartingExcludeEachOther) {
  std::vector<Condition> conditions;
  EXPECT_TRUE(set_exclusive_running(conditions, CONDITION_RUNNING, "PodsRunning", "2/2 running", 1, T0));
  EXPECT_TRUE(is_true(conditions, CONDITION_RUNNING));
  ASSERT_NE(find_condition(conditions, CONDITION_RESTARTING), nullptr);
  EXPECT_EQ(find_condition(conditions, CONDITION_RESTARTING)->status, "False");

  EXPECT_TRUE(set_exclusive_running(conditions, CONDITION_RESTARTING, "WorkerFailed", "rank 1 exited 137", 1, T1));
  EXPECT_TRUE(is_true(conditions, CONDITION_RESTARTING));
  EXPECT_FALSE(is_true(conditions, CONDITION_RUNNING));
  EXPECT_EQ(find_condition(conditions, CONDITION_RUNNING)->last_transition_time, T1);
  EXPECT_EQ(find_condition(conditions, CONDITION_RUNNING)->reason, "WorkerFailed");

  EXPECT_TRUE(set_exclusive_running(conditions, CONDITION_RUNNING, "PodsRunning", "resumed from step 100", 1, T2));
  EXPECT_TRUE(is_true(conditions, CONDITION_RUNNING));
  EXPECT_FALSE(is_true(conditions, CONDITION_RESTARTING));
  EXPECT_EQ(conditions.size(), 2u);
  EXPECT_FALSE(set_exclusive_running(conditions, CONDITION_RUNNING, "PodsRunning", "resumed from step 100", 1, T2));
  EXPECT_THROW(set_exclusive_running(conditions, CONDITION_SUCCEEDED, "Done", "", 1, T2), std::invalid_argument);
}

TEST(Conditions, FinishedMeansSucceededOrFailedTrue) {
  std::vector<Condition> conditions;
  EXPECT_FALSE(is_finished(conditions));
  set_condition(conditions, CONDITION_FAILED, CONDITION_FALSE, "NotFailed", "", 1, T0);
  EXPECT_FALSE(is_finished(conditions));
  set_condition(conditions, CONDITION_SUCCEEDED, CONDITION_TRUE, "AllRanksSucceeded", "300 steps", 1, T1);
  EXPECT_TRUE(is_finished(conditions));
  std::vector<Condition> failed;
  set_condition(failed, CONDITION_FAILED, CONDITION_TRUE, "BackoffLimitExceeded", "3 restarts", 1, T1);
  EXPECT_TRUE(is_finished(failed));
}

TEST(Conditions, BadArgumentsAreRefused) {
  std::vector<Condition> conditions;
  EXPECT_THROW(set_condition(conditions, CONDITION_RUNNING, "yes", "R", "", 1, T0), std::invalid_argument);
  EXPECT_THROW(set_condition(conditions, CONDITION_RUNNING, CONDITION_TRUE, "", "", 1, T0), std::invalid_argument);
  EXPECT_THROW(set_condition(conditions, "", CONDITION_TRUE, "R", "", 1, T0), std::invalid_argument);
  EXPECT_TRUE(conditions.empty());
  EXPECT_EQ(find_condition(conditions, CONDITION_RUNNING), nullptr);
  EXPECT_FALSE(is_true(conditions, CONDITION_RUNNING));
}

}  // namespace
}  // namespace qsync::api
