// File: worker/dist/gradient_sync.cpp
// Bucket formation, the choice of synchronizer, and the host implementation: readiness
// tracking and the communication thread.
#include "worker/dist/gradient_sync.h"

#include <chrono>
#include <cstring>

#include "worker/model.h"
#if defined(QSYNC_WITH_CUDA)
#include "worker/dist/gradient_sync_device.h"
#endif

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t padded(int64_t n) {
  return (n + Model::PARAMETER_ALIGNMENT - 1) / Model::PARAMETER_ALIGNMENT * Model::PARAMETER_ALIGNMENT;
}

}  // namespace

std::vector<GradientBucket> gradient_buckets(Model& model, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) throw std::invalid_argument("gradient bucket size must be positive");
  std::vector<GradientBucket> buckets;
  const std::vector<Parameter*>& params = model.parameters();
  // Reverse forward order: the last layer's gradients are ready first, and lie first in the
  // flat buffer; a bucket's parameters are consecutive there.
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    Parameter* p = *it;
    if (buckets.empty() || buckets.back().count * int64_t(sizeof(float)) >= bucket_bytes) {
      buckets.emplace_back();
      buckets.back().offset = model.offset_of(p);
    }
    GradientBucket& b = buckets.back();
    if (model.offset_of(p) != b.offset + b.count)
      throw std::logic_error("gradient buckets: parameter '" + p->name + "' is not next in the flat gradient buffer");
    b.params.push_back(p);
    b.count += padded(p->grad.numel());
  }
  return buckets;
}

std::unique_ptr<GradientSync> gradient_sync_create(Collectives& collectives, Collectives* nccl, Model& model,
                                                   int64_t bucket_bytes) {
  if (model.ops().device().is_host()) return std::make_unique<HostGradientSync>(collectives, model, bucket_bytes);
#if defined(QSYNC_WITH_CUDA)
  return std::make_unique<DeviceGradientSync>(collectives, nccl, model, bucket_bytes);
#else
  (void)nccl;
  throw std::logic_error("gradient_sync_create: a device model in a build without CUDA");
#endif
}

HostGradientSync::HostGradientSync(Collectives& collectives, Model& model, int64_t bucket_bytes)
    : collectives_(collectives), grads_(model.flat_gradients().f32()) {
  for (GradientBucket& range : gradient_buckets(model, bucket_bytes)) {
    Bucket b;
    b.range = std::move(range);
    b.flat.resize(size_t(b.range.count));
    for (Parameter* p : b.range.params) bucket_of_[p] = buckets_.size();
    buckets_.push_back(std::move(b));
  }
  comm_ = std::thread([this] { comm_loop(); });
}

HostGradientSync::~HostGradientSync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_.join();
}

void HostGradientSync::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) b.pending = int64_t(b.range.params.size());
  for (auto& [p, r] : ready_) r = false;
  next_launch_ = done_ = 0;
  allreduce_seconds_ = 0;
  error_ = nullptr;
}

void HostGradientSync::layer_backward_done(Layer& layer) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  for (Parameter* p : params) mark_ready(p);
}

// Copies the bucket's range into its buffer, on the compute thread: the gradients are final.
void HostGradientSync::copy_in(Bucket& b) {
  std::memcpy(b.flat.data(), grads_ + b.range.offset, size_t(b.range.count) * sizeof(float));
}

void HostGradientSync::mark_ready(Parameter* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = bucket_of_.find(p);
  if (it == bucket_of_.end() || ready_[p]) return;
  ready_[p] = true;
  Bucket& b = buckets_[it->second];
  if (--b.pending == 0) copy_in(b);
  launch_ready_buckets();
}

void HostGradientSync::launch_ready_buckets() {
  bool launched = false;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    queue_.push_back(next_launch_++);
    launched = true;
  }
  if (launched) cv_.notify_all();
}

void HostGradientSync::finish_step() {
  const double t0 = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  // Parameters no backward reached (unused this step) contribute zero gradients.
  for (Bucket& b : buckets_)
    if (b.pending > 0) {
      for (Parameter* q : b.range.params) ready_[q] = true;
      b.pending = 0;
      copy_in(b);
    }
  launch_ready_buckets();
  cv_.wait(lock, [this] { return done_ == buckets_.size() || error_ != nullptr; });
  wait_seconds_ = now_seconds() - t0;
  if (error_) std::rethrow_exception(error_);
  for (Bucket& b : buckets_)
    std::memcpy(grads_ + b.range.offset, b.flat.data(), size_t(b.range.count) * sizeof(float));
}

void HostGradientSync::comm_loop() {
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
