// File: tests/worker/optimizer_test.cpp
// The learning-rate schedule: linear warm-up, then constant or cosine decay to the floor; the
// schedule names as the worker's --lr-schedule flag and job files spell them.
#include <gtest/gtest.h>

#include <cmath>

#include "worker/optimizer.h"

namespace qsync {
namespace {

Optimizer optimizer_with(LrSchedule schedule, MemoryAccount* memory) {
  OptimizerConfig c;
  c.lr = 0.01;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1;
  c.schedule = schedule;
  return Optimizer(c, {}, memory);
}

TEST(LrSchedule, CosineWarmsUpThenDecaysToTheFloor) {
  MemoryAccount memory;
  const Optimizer opt = optimizer_with(LrSchedule::COSINE, &memory);
  EXPECT_DOUBLE_EQ(opt.lr_at(0), 0.001);   // 1/10 of the way up
  EXPECT_DOUBLE_EQ(opt.lr_at(9), 0.01);    // warm-up done
  EXPECT_DOUBLE_EQ(opt.lr_at(10), 0.01);   // cosine starts at the peak
  EXPECT_NEAR(opt.lr_at(60), 0.0055, 1e-12);  // half way: the mean of peak and floor
  EXPECT_NEAR(opt.lr_at(110), 0.001, 1e-12);  // the floor, and it stays there
  EXPECT_NEAR(opt.lr_at(500), 0.001, 1e-12);
}

TEST(LrSchedule, ConstantKeepsThePeakAfterWarmUp) {
  MemoryAccount memory;
  const Optimizer opt = optimizer_with(LrSchedule::CONSTANT, &memory);
  EXPECT_DOUBLE_EQ(opt.lr_at(4), 0.005);
  EXPECT_DOUBLE_EQ(opt.lr_at(10), 0.01);
  EXPECT_DOUBLE_EQ(opt.lr_at(60), 0.01);
  EXPECT_DOUBLE_EQ(opt.lr_at(500), 0.01);
}

TEST(LrSchedule, NamesRoundTripAndUnknownNamesListTheKnownOnes) {
  for (LrSchedule s : {LrSchedule::CONSTANT, LrSchedule::COSINE})
    EXPECT_EQ(lr_schedule_from_name(lr_schedule_name(s)), s);
  try {
    lr_schedule_from_name("linear");
    FAIL() << "an unknown schedule was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("constant, cosine"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync
