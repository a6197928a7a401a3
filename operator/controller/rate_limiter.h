// File: operator/controller/rate_limiter.h
// How long a work-queue key waits before it is retried, as client-go's workqueue rate limiters:
// per item exponential backoff (5 ms doubling up to 1000 s, reset by forget()), a global token
// bucket shared by every key (10 qps, burst 100), and MaxOf, which waits the longest of several
// (controller-runtime's default limiter is MaxOf(exponential, bucket)). Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "operator/kube/token_bucket.h"

namespace qsync::controller {

using Duration = std::chrono::steady_clock::duration;

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // The delay before `item` may be processed again; counts one more failure of it.
  virtual Duration when(const std::string& item) = 0;
  // Clears the failures of `item` (it succeeded).
  virtual void forget(const std::string& item) = 0;
  // How many times `item` was requeued since it was last forgotten.
  virtual int num_requeues(const std::string& item) = 0;
};

// base * 2^failures, capped.
class ItemExponentialRateLimiter : public RateLimiter {
 public:
  ItemExponentialRateLimiter(Duration base = std::chrono::milliseconds(5),
                             Duration cap = std::chrono::seconds(1000));
  Duration when(const std::string& item) override;
  void forget(const std::string& item) override;
  int num_requeues(const std::string& item) override;

 private:
  Duration base_, cap_;
  std::mutex mu_;
  std::map<std::string, int> failures_;
};

// One token bucket for all items: bursts pass at once, a sustained flood is held to `qps`.
class BucketRateLimiter : public RateLimiter {
 public:
  BucketRateLimiter(double qps = 10, int burst = 100);
  Duration when(const std::string& item) override;
  void forget(const std::string&) override {}
  int num_requeues(const std::string&) override { return 0; }

 private:
  kube::TokenBucket bucket_;
};

// The longest delay of its limiters; forget() forgets in all of them.
class MaxOfRateLimiter : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters);
  Duration when(const std::string& item) override;
  void forget(const std::string& item) override;
  int num_requeues(const std::string& item) override;

 private:
  std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// controller-runtime's default: MaxOf(exponential 5 ms .. 1000 s, bucket 10 qps / burst 100).
std::unique_ptr<RateLimiter> default_controller_rate_limiter();

}  // namespace qsync::controller
