// File: tests/operator/controller/micro_time_test.cpp
// Kubernetes MicroTime formatting and parsing.
#include "operator/controller/micro_time.h"

#include <gtest/gtest.h>

namespace qsync::controller {
namespace {

using namespace std::chrono;

TEST(MicroTime, FormatsUtcWithMicroseconds) {
  const system_clock::time_point t = system_clock::time_point(seconds(1796070710) + microseconds(123456));
  EXPECT_EQ(micro_time_format(t), "2026-11-30T20:31:50.123456Z");
  EXPECT_EQ(micro_time_format(system_clock::time_point(seconds(0))), "1970-01-01T00:00:00.000000Z");
}

TEST(MicroTime, ParsesMicroTimeAndPlainSeconds) {
  EXPECT_EQ(micro_time_parse("2026-11-30T20:31:50.123456Z"),
            system_clock::time_point(seconds(1796070710) + microseconds(123456)));
  EXPECT_EQ(micro_time_parse("2026-11-30T20:31:50Z"), system_clock::time_point(seconds(1796070710)));
  EXPECT_EQ(micro_time_parse("2026-11-30T20:31:50.5Z"), system_clock::time_point(seconds(1796070710) + milliseconds(500)));
}

TEST(MicroTime, RoundTripsNow) {
  const std::string now = micro_time_now();
  EXPECT_EQ(micro_time_format(micro_time_parse(now)), now);
}

TEST(MicroTime, RejectsOtherText) {
  EXPECT_THROW(micro_time_parse("yesterday"), std::invalid_argument);
  EXPECT_THROW(micro_time_parse("2026-11-30T20:31:50+01:00"), std::invalid_argument);
  EXPECT_THROW(micro_time_parse("2026-11-30T20:31:50.1Zjunk"), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::controller
