// File: worker/dist/gradient_sync.cpp
// Buckets, readiness tracking and the communication thread.
#include "worker/dist/gradient_sync.h"

#include <chrono>
#include <cstring>

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

GradientSync::GradientSync(Collectives& collectives, const std::vector<Parameter*>& params, int64_t bucket_bytes)
    : collectives_(collectives) {
  if (bucket_bytes <= 0) throw std::invalid_argument("gradient bucket size must be positive");
  // Reverse forward order: the last layer's gradients are ready first.
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    Parameter* p = *it;
    if (buckets_.empty() || int64_t(buckets_.back().flat.size() * sizeof(float)) >= bucket_bytes) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    b.params.push_back(p);
    b.flat.resize(b.flat.size() + size_t(p->grad.numel()));
    bucket_of_[p] = buckets_.size() - 1;
  }
  comm_ = std::thread([this] { comm_loop(); });
}

GradientSync::~GradientSync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_.join();
}

void GradientSync::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) b.pending = int64_t(b.params.size());
  for (auto& [p, r] : ready_) r = false;
  next_launch_ = done_ = 0;
  allreduce_seconds_ = 0;
  error_ = nullptr;
}

void GradientSync::layer_backward_done(Layer& layer) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  for (Parameter* p : params) mark_ready(p);
}

void GradientSync::mark_ready(Parameter* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = bucket_of_.find(p);
  if (it == bucket_of_.end() || ready_[p]) return;
  ready_[p] = true;
  Bucket& b = buckets_[it->second];
  if (--b.pending == 0) {
    // Copy the gradients into the bucket now, on the compute thread: they are final.
    size_t offset = 0;
    for (Parameter* q : b.params) {
      std::memcpy(b.flat.data() + offset, q->grad.data(), size_t(q->grad.bytes()));
      offset += size_t(q->grad.numel());
    }
  }
  launch_ready_buckets();
}

void GradientSync::launch_ready_buckets() {
  bool launched = false;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    queue_.push_back(next_launch_++);
    launched = true;
  }
  if (launched) cv_.notify_all();
}

void GradientSync::finish_step() {
  const double t0 = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  // Parameters no backward reached (unused this step) contribute zero gradients.
  for (Bucket& b : buckets_)
    if (b.pending > 0) {
      for (Parameter* q : b.params) ready_[q] = true;
      b.pending = 0;
      size_t offset = 0;
      for (Parameter* q : b.params) {
        std::memcpy(b.flat.data() + offset, q->grad.data(), size_t(q->grad.bytes()));
        offset += size_t(q->grad.numel());
      }
    }
  launch_ready_buckets();
  cv_.wait(lock, [this] { return done_ == buckets_.size() || error_ != nullptr; });
  wait_seconds_ = now_seconds() - t0;
  if (error_) std::rethrow_exception(error_);
  for (Bucket& b : buckets_) {
    size_t offset = 0;
    for (Parameter* q : b.params) {
      std::memcpy(q->grad.data(), b.flat.data() + offset, size_t(q->grad.bytes()));
      offset += size_t(q->grad.numel());
    }
  }
}

void GradientSync::comm_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t index = queue_.front();
    queue_.pop_front();
    Bucket& b = buckets_[index];
    lock.unlock();
    const double t0 = now_seconds();
    std::exception_ptr error;
    try {
      collectives_.all_reduce_sum(b.flat.data(), int64_t(b.flat.size()));
    } catch (...) {
      error = std::current_exception();
    }
    const double dt = now_seconds() - t0;
    lock.lock();
    allreduce_seconds_ += dt;
    if (error) error_ = error;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace qsync
