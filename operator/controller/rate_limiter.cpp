// File: operator/controller/rate_limiter.cpp
// The work queue's rate limiters: per item exponential backoff, a global token bucket, MaxOf.
#include "operator/controller/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace qsync::controller {

ItemExponentialRateLimiter::ItemExponentialRateLimiter(Duration base, Duration cap) : base_(base), cap_(cap) {
  if (base <= Duration::zero() || cap < base) {
    throw std::invalid_argument("ItemExponentialRateLimiter: base must be positive and cap at least base");
  }
}

Duration ItemExponentialRateLimiter::when(const std::string& item) {
  int exponent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exponent = failures_[item]++;
  }
  // Computed in double so that 2^exponent cannot overflow before the cap applies.
  const double delay = static_cast<double>(base_.count()) * std::pow(2.0, exponent);
  if (delay >= static_cast<double>(cap_.count())) return cap_;
  return Duration(static_cast<Duration::rep>(delay));
}

void ItemExponentialRateLimiter::forget(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(item);
}

int ItemExponentialRateLimiter::num_requeues(const std::string& item) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

BucketRateLimiter::BucketRateLimiter(double qps, int burst) : bucket_(qps, burst) {}

Duration BucketRateLimiter::when(const std::string&) { return bucket_.reserve(); }

MaxOfRateLimiter::MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
    : limiters_(std::move(limiters)) {
  if (limiters_.empty()) throw std::invalid_argument("MaxOfRateLimiter needs at least one limiter");
}

Duration MaxOfRateLimiter::when(const std::string& item) {
  Duration longest = Duration::zero();
  for (auto& limiter : limiters_) longest = std::max(longest, limiter->when(item));
  return longest;
}

void MaxOfRateLimiter::forget(const std::string& item) {
  for (auto& limiter : limiters_) limiter->forget(item);
}

int MaxOfRateLimiter::num_requeues(const std::string& item) {
  int most = 0;
  for (auto& limiter : limiters_) most = std::max(most, limiter->num_requeues(item));
  return most;
}

std::unique_ptr<RateLimiter> default_controller_rate_limiter() {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(std::make_unique<ItemExponentialRateLimiter>());
  limiters.push_back(std::make_unique<BucketRateLimiter>());
  return std::make_unique<MaxOfRateLimiter>(std::move(limiters));
}

}  // namespace qsync::controller
