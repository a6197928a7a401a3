// File: operator/kube/token_bucket.h
// A token bucket: `qps` tokens a second up to `burst`. The client's request limiter and the
// work queue's global rate limiter. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>

namespace qsync::kube {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double qps, int burst);  // qps <= 0: unlimited
  // Takes a token, returning how long the caller must wait before using it (zero when one was
  // available). Reserving ahead keeps callers in order.
  Clock::duration reserve();
  // Takes a token and sleeps until it may be used.
  void wait();
  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  double qps_;
  int burst_;
  std::mutex mu_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace qsync::kube
