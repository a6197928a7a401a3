// File: operator/controller/work_queue.cpp
// The de-duplicating, delaying, rate-limited work queue (client-go's workqueue semantics).
#include "operator/controller/work_queue.h"

namespace qsync::controller {

namespace {
double seconds_between(WorkQueue::Clock::time_point from, WorkQueue::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
}  // namespace

WorkQueue::WorkQueue(std::string name, std::unique_ptr<RateLimiter> limiter, std::shared_ptr<WorkQueueMetrics> metrics)
    : name_(std::move(name)),
      limiter_(limiter ? std::move(limiter) : default_controller_rate_limiter()),
      metrics_(std::move(metrics)) {
  timer_ = std::thread([this] { run_timer(); });
}

WorkQueue::~WorkQueue() { shut_down(); }

void WorkQueue::add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  add_locked(key);
}

void WorkQueue::add_locked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  if (metrics_) metrics_->added();
  dirty_.insert(key);
  if (processing_.count(key)) return;  // done() queues it
  queue_.push_back(key);
  queued_at_[key] = Clock::now();
  if (metrics_) metrics_->depth_changed(static_cast<int64_t>(queue_.size()));
  ready_cv_.notify_one();
}

void WorkQueue::add_after(const std::string& key, Clock::duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  if (delay <= Clock::duration::zero()) {
    add_locked(key);
    return;
  }
  const Clock::time_point ready = Clock::now() + delay;
  auto it = waiting_ready_.find(key);
  if (it != waiting_ready_.end() && it->second <= ready) return;
  // An earlier ready time replaces the later one; the stale heap entry is skipped when it pops.
  waiting_ready_[key] = ready;
  waiting_.push(Waiting{ready, sequence_++, key});
  timer_cv_.notify_one();
}

void WorkQueue::add_rate_limited(const std::string& key) {
  const Clock::duration delay = limiter_->when(key);
  if (metrics_) metrics_->retried();
  add_after(key, delay);
}

void WorkQueue::forget(const std::string& key) { limiter_->forget(key); }

int WorkQueue::num_requeues(const std::string& key) { return limiter_->num_requeues(key); }

std::optional<std::string> WorkQueue::get() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [this] { return shutting_down_ || !queue_.empty(); });
  if (shutting_down_) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  const Clock::time_point now = Clock::now();
  if (metrics_) {
    metrics_->depth_changed(static_cast<int64_t>(queue_.size()));
    auto queued = queued_at_.find(key);
    if (queued != queued_at_.end()) metrics_->queued_for(seconds_between(queued->second, now));
  }
  queued_at_.erase(key);
  processing_.insert(key);
  dirty_.erase(key);
  started_at_[key] = now;
  return key;
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto started = started_at_.find(key);
  if (started != started_at_.end()) {
    if (metrics_) metrics_->worked_for(seconds_between(started->second, Clock::now()));
    started_at_.erase(started);
  }
  processing_.erase(key);
  if (dirty_.count(key) && !shutting_down_) {
    queue_.push_back(key);
    queued_at_[key] = Clock::now();
    if (metrics_) metrics_->depth_changed(static_cast<int64_t>(queue_.size()));
    ready_cv_.notify_one();
  }
  if (processing_.empty()) drained_cv_.notify_all();
}

void WorkQueue::shut_down() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  ready_cv_.notify_all();
  timer_cv_.notify_all();
  if (timer_.joinable() && timer_.get_id() != std::this_thread::get_id()) timer_.join();
}

void WorkQueue::shut_down_with_drain() {
  shut_down();
  std::unique_lock<std::mutex> lock(mu_);
  drained_cv_.wait(lock, [this] { return processing_.empty(); });
}

bool WorkQueue::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

int WorkQueue::len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

int WorkQueue::processing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(processing_.size());
}

void WorkQueue::run_timer() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    if (waiting_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const Waiting next = waiting_.top();
    if (Clock::now() < next.ready) {
      timer_cv_.wait_until(lock, next.ready);
      continue;
    }
    waiting_.pop();
    auto it = waiting_ready_.find(next.key);
    if (it == waiting_ready_.end() || it->second != next.ready) continue;  // superseded entry
    waiting_ready_.erase(it);
    add_locked(next.key);
  }
}

}  // namespace qsync::controller
