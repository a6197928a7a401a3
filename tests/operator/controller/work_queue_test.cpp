// File: tests/operator/controller/work_queue_test.cpp
// The work queue: de-duplication, re-queue of a key added while processing, add_after ordering,
// rate-limited backoff and forget, shutdown unblocking get(), and its metrics hooks.
#include "operator/controller/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/operator/numbered.h"

namespace qsync::controller {
namespace {

using operator_test::numbered;
using std::chrono::milliseconds;

std::unique_ptr<RateLimiter> exponential(milliseconds base) {
  return std::make_unique<ItemExponentialRateLimiter>(base, std::chrono::seconds(100));
}

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q("test");
  q.add("ns/a");
  q.add("ns/b");
  q.add("ns/a");
  q.add("ns/a");
  EXPECT_EQ(q.len(), 2);
  EXPECT_EQ(q.get(), "ns/a");
  EXPECT_EQ(q.get(), "ns/b");
  EXPECT_EQ(q.len(), 0);
}

TEST(WorkQueue, KeyAddedWhileProcessingIsQueuedOnceAfterDone) {
  WorkQueue q("test");
  q.add("ns/a");
  ASSERT_EQ(q.get(), "ns/a");
  q.add("ns/a");
  q.add("ns/a");
  EXPECT_EQ(q.len(), 0) << "a key being processed is not handed to a second worker";
  EXPECT_EQ(q.processing(), 1);
  q.done("ns/a");
  EXPECT_EQ(q.len(), 1);
  EXPECT_EQ(q.get(), "ns/a");
  q.done("ns/a");
  EXPECT_EQ(q.len(), 0);
  EXPECT_EQ(q.processing(), 0);
}

TEST(WorkQueue, AddAfterReleasesKeysInReadyOrder) {
  WorkQueue q("test");
  const auto start = WorkQueue::Clock::now();
  q.add_after("ns/late", milliseconds(150));
  q.add_after("ns/early", milliseconds(50));
  q.add_after("ns/now", milliseconds(0));
  EXPECT_EQ(q.get(), "ns/now");
  EXPECT_EQ(q.get(), "ns/early");
  EXPECT_EQ(q.get(), "ns/late");
  EXPECT_GE(WorkQueue::Clock::now() - start, milliseconds(150));
}

TEST(WorkQueue, AddAfterKeepsTheEarlierReadyTimeOfAWaitingKey) {
  WorkQueue q("test");
  q.add_after("ns/a", std::chrono::seconds(60));
  q.add_after("ns/a", milliseconds(20));
  q.add_after("ns/a", std::chrono::seconds(30));
  EXPECT_EQ(q.get(), "ns/a");
  q.done("ns/a");
  EXPECT_EQ(q.len(), 0);
}

TEST(WorkQueue, RateLimitedBackoffGrowsAndForgetResetsIt) {
  WorkQueue q("test", exponential(milliseconds(20)));
  auto measure = [&q] {
    const auto start = WorkQueue::Clock::now();
    q.add_rate_limited("ns/a");
    auto key = q.get();
    q.done(*key);
    return WorkQueue::Clock::now() - start;
  };
  EXPECT_GE(measure(), milliseconds(20));
  EXPECT_GE(measure(), milliseconds(40));
  EXPECT_GE(measure(), milliseconds(80));
  EXPECT_EQ(q.num_requeues("ns/a"), 3);
  q.forget("ns/a");
  EXPECT_EQ(q.num_requeues("ns/a"), 0);
  EXPECT_LT(measure(), milliseconds(20 * 10)) << "after forget the delay is the base again";
}

TEST(WorkQueue, ShutDownUnblocksGetAndIgnoresAdds) {
  WorkQueue q("test");
  auto waiting = std::async(std::launch::async, [&q] { return q.get(); });
  std::this_thread::sleep_for(milliseconds(50));
  q.shut_down();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiting.get(), std::nullopt);
  q.add("ns/a");
  EXPECT_EQ(q.len(), 0);
  EXPECT_EQ(q.get(), std::nullopt);
  EXPECT_TRUE(q.shutting_down());
}

TEST(WorkQueue, ShutDownWithDrainWaitsForProcessingKeys) {
  WorkQueue q("test");
  q.add("ns/a");
  ASSERT_EQ(q.get(), "ns/a");
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    q.shut_down_with_drain();
    drained = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(drained.load()) << "drain returned while a key was still processing";
  q.done("ns/a");
  drainer.join();
  EXPECT_TRUE(drained.load());
}

TEST(WorkQueue, ManyProducersAndConsumersLoseNoKey) {
  WorkQueue q("test");
  constexpr int kKeys = 500;
  std::mutex seen_mu;
  std::set<std::string> seen;
  std::vector<std::thread> consumers;
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&] {
      while (auto key = q.get()) {
        {
          std::lock_guard<std::mutex> lock(seen_mu);
          seen.insert(*key);
        }
        q.done(*key);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < 3; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < kKeys; ++i) q.add(numbered("ns/k", i));
    });
  }
  for (auto& t : producers) t.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(seen_mu);
      if (seen.size() == kKeys) break;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  q.shut_down();
  for (auto& t : consumers) t.join();
  EXPECT_EQ(seen.size(), static_cast<size_t>(kKeys));
}

struct CountingMetrics : WorkQueueMetrics {
  std::atomic<int> adds{0}, retries{0}, queued{0}, worked{0};
  std::atomic<int64_t> depth{-1};
  void added() override { ++adds; }
  void depth_changed(int64_t d) override { depth = d; }
  void retried() override { ++retries; }
  void queued_for(double) override { ++queued; }
  void worked_for(double) override { ++worked; }
};

TEST(WorkQueue, ReportsToItsMetrics) {
  auto metrics = std::make_shared<CountingMetrics>();
  WorkQueue q("test", exponential(milliseconds(1)), metrics);
  q.add("ns/a");
  q.add("ns/a");
  q.add("ns/b");
  EXPECT_EQ(metrics->adds.load(), 2);
  EXPECT_EQ(metrics->depth.load(), 2);
  auto key = q.get();
  EXPECT_EQ(metrics->depth.load(), 1);
  EXPECT_EQ(metrics->queued.load(), 1);
  q.done(*key);
  EXPECT_EQ(metrics->worked.load(), 1);
  q.add_rate_limited("ns/c");
  EXPECT_EQ(metrics->retries.load(), 1);
}

}  // namespace
}  // namespace qsync::controller
