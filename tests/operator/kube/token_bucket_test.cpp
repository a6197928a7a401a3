// File: tests/operator/kube/token_bucket_test.cpp
// The token bucket: a burst is free, then tokens come at `qps`; reservations queue in order;
// qps <= 0 is unlimited. Timing bounds are loose (10x or more).
#include "operator/kube/token_bucket.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace qsync::kube {
namespace {

using std::chrono::duration;

double seconds(TokenBucket::Clock::duration d) { return duration<double>(d).count(); }

TEST(TokenBucketTest, BurstIsImmediateThenRateApplies) {
  TokenBucket bucket(10, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(bucket.reserve(), TokenBucket::Clock::duration::zero()) << i;
  double sixth = seconds(bucket.reserve());
  EXPECT_GT(sixth, 0.0);
  EXPECT_LT(sixth, 1.0);  // about 0.1 s
  double seventh = seconds(bucket.reserve());
  EXPECT_GT(seventh, sixth);  // reserved ahead: later callers wait longer
  EXPECT_LT(seventh, 2.0);   // about 0.2 s
}

TEST(TokenBucketTest, TokensRefillOverTimeUpToBurst) {
  TokenBucket bucket(20, 2);
  bucket.reserve();
  bucket.reserve();
  EXPECT_GT(seconds(bucket.reserve()), 0.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // refills far more than burst
  EXPECT_EQ(bucket.reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_EQ(bucket.reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_GT(seconds(bucket.reserve()), 0.0);  // capped at burst, not at 8 tokens
}

TEST(TokenBucketTest, WaitPacesCallers) {
  TokenBucket bucket(50, 1);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 11; ++i) bucket.wait();  // 1 free, then 10 at 20 ms each
  double elapsed = duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(elapsed, 0.15);
  EXPECT_LT(elapsed, 2.0);
}

TEST(TokenBucketTest, NonPositiveQpsIsUnlimited) {
  TokenBucket bucket(0, 1);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(bucket.reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_EQ(bucket.qps(), 0.0);
}

TEST(TokenBucketTest, ConcurrentCallersShareTheRate) {
  TokenBucket bucket(100, 10);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&bucket] {
      for (int i = 0; i < 10; ++i) bucket.wait();
    });
  }
  for (auto& thread : threads) thread.join();
  double elapsed = duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(elapsed, 0.2);  // 40 tokens, 10 free, 30 at 10 ms each
  EXPECT_LT(elapsed, 3.0);
}

}  // namespace
}  // namespace qsync::kube
