// File: tests/operator/controller/rate_limiter_test.cpp
// The work queue's rate limiters: exponential growth and cap, forget, the token bucket's burst
// and rate, and MaxOf taking the longest delay.
#include "operator/controller/rate_limiter.h"

#include <gtest/gtest.h>

#include "tests/operator/numbered.h"

namespace qsync::controller {
namespace {

using operator_test::numbered;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ItemExponentialRateLimiter, DoublesPerFailureFromFiveMillisecondsAndCaps) {
  ItemExponentialRateLimiter limiter;
  EXPECT_EQ(limiter.when("a"), milliseconds(5));
  EXPECT_EQ(limiter.when("a"), milliseconds(10));
  EXPECT_EQ(limiter.when("a"), milliseconds(20));
  EXPECT_EQ(limiter.num_requeues("a"), 3);
  EXPECT_EQ(limiter.when("b"), milliseconds(5)) << "keys back off independently";
  for (int i = 0; i < 40; ++i) limiter.when("a");
  EXPECT_EQ(limiter.when("a"), seconds(1000)) << "the default cap is 1000 s";
  for (int i = 0; i < 2000; ++i) limiter.when("a");
  EXPECT_EQ(limiter.when("a"), seconds(1000)) << "huge exponents must not overflow past the cap";
}

TEST(ItemExponentialRateLimiter, ForgetResetsBackoff) {
  ItemExponentialRateLimiter limiter(milliseconds(1), seconds(1));
  limiter.when("a");
  limiter.when("a");
  limiter.forget("a");
  EXPECT_EQ(limiter.num_requeues("a"), 0);
  EXPECT_EQ(limiter.when("a"), milliseconds(1));
}

TEST(ItemExponentialRateLimiter, RejectsNonPositiveBase) {
  EXPECT_THROW(ItemExponentialRateLimiter(milliseconds(0), seconds(1)), std::invalid_argument);
  EXPECT_THROW(ItemExponentialRateLimiter(seconds(2), seconds(1)), std::invalid_argument);
}

TEST(BucketRateLimiter, BurstPassesThenRateApplies) {
  BucketRateLimiter limiter(10, 5);  // 10 tokens/s, burst 5
  for (int i = 0; i < 5; ++i) EXPECT_EQ(limiter.when(numbered("k", i)), Duration::zero()) << i;
  const Duration sixth = limiter.when("k5");
  EXPECT_GT(sixth, milliseconds(50));
  EXPECT_LE(sixth, milliseconds(110));
  const Duration seventh = limiter.when("k6");
  EXPECT_GT(seventh, sixth) << "reservations queue up behind one another";
  EXPECT_EQ(limiter.num_requeues("k5"), 0);
}

TEST(MaxOfRateLimiter, TakesLongestDelayAndForgetsInAll) {
  std::vector<std::unique_ptr<RateLimiter>> parts;
  parts.push_back(std::make_unique<ItemExponentialRateLimiter>(milliseconds(100), seconds(10)));
  parts.push_back(std::make_unique<BucketRateLimiter>(1000, 1000));
  MaxOfRateLimiter limiter(std::move(parts));
  EXPECT_EQ(limiter.when("a"), milliseconds(100));
  EXPECT_EQ(limiter.when("a"), milliseconds(200));
  EXPECT_EQ(limiter.num_requeues("a"), 2);
  limiter.forget("a");
  EXPECT_EQ(limiter.num_requeues("a"), 0);
  EXPECT_EQ(limiter.when("a"), milliseconds(100));
}

TEST(DefaultControllerRateLimiter, IsExponentialUntilTheBucketRunsDry) {
  auto limiter = default_controller_rate_limiter();
  EXPECT_EQ(limiter->when("a"), milliseconds(5));
  EXPECT_EQ(limiter->when("a"), milliseconds(10));
  // 98 more distinct keys use up the burst of 100 ...
  for (int i = 0; i < 98; ++i) limiter->when(numbered("key-", i));
  // ... so a fresh key now waits for the bucket (about 100 ms at 10 qps), not just 5 ms.
  EXPECT_GT(limiter->when("fresh"), milliseconds(50));
}

}  // namespace
}  // namespace qsync::controller
