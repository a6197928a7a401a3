// File: operator/kube/token_bucket.cpp
// The token bucket: tokens refill at `qps` a second up to `burst`; a caller that finds none
// reserves the next one (the count goes negative), so waiters are served in order.
#include "operator/kube/token_bucket.h"

#include <algorithm>
#include <thread>

namespace qsync::kube {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), burst_(std::max(burst, 1)), tokens_(static_cast<double>(std::max(burst, 1))), last_(Clock::now()) {}

TokenBucket::Clock::duration TokenBucket::reserve() {
  if (qps_ <= 0) return Clock::duration::zero();
  std::lock_guard<std::mutex> lock(mu_);
  Clock::time_point now = Clock::now();
  double elapsed = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + elapsed * qps_);
  tokens_ -= 1.0;
  if (tokens_ >= 0) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / qps_));
}

void TokenBucket::wait() {
  Clock::duration delay = reserve();
  if (delay > Clock::duration::zero()) std::this_thread::sleep_for(delay);
}

}  // namespace qsync::kube
