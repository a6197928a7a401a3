// File: worker/dist/gradient_sync_device.cpp
// DeviceGradientSync (see gradient_sync_device.h).
#include "worker/dist/gradient_sync_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "kernels/cuda/cuda_device.h"
#include "worker/dist/collectives_nccl.h"
#include "worker/model.h"
#include "worker/ops/cuda/cuda_memory.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

void* new_event() {
  cudaEvent_t e = nullptr;
  QSYNC_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

CudaOps& cuda_ops_of(Model& model) {
  auto* ops = dynamic_cast<CudaOps*>(&model.ops());
  if (ops == nullptr) throw std::logic_error("DeviceGradientSync: the model does not compute on CUDA ops");
  return *ops;
}

}  // namespace

DeviceGradientSync::DeviceGradientSync(Collectives& gloo, Collectives* nccl, Model& model, int64_t bucket_bytes)
    : gloo_(gloo), nccl_(nullptr), ops_(cuda_ops_of(model)), grads_(model.flat_gradients().as<float>()) {
  if (nccl != nullptr) {
    nccl_ = dynamic_cast<NcclCollectives*>(nccl);
    if (nccl_ == nullptr) throw std::logic_error("DeviceGradientSync: the device collectives are not NCCL");
  }
  cuda_set_device(ops_.device().index);
  if (nccl_ == nullptr) {
    cudaStream_t s = nullptr;
    QSYNC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    copy_stream_ = s;
  }
  step_end_ = new_event();
  for (GradientBucket& range : gradient_buckets(model, bucket_bytes)) {
    Bucket b;
    b.range = std::move(range);
    b.ready = new_event();
    b.started = new_event();
    b.done = new_event();
    for (Parameter* p : b.range.params) bucket_of_[p] = buckets_.size();
    if (nccl_ == nullptr) pinned_.emplace_back(b.range.count * int64_t(sizeof(float)));
    buckets_.push_back(std::move(b));
  }
  comm_ = std::thread([this] { comm_loop(); });
}

DeviceGradientSync::~DeviceGradientSync() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_.join();
  (void)cudaDeviceSynchronize();  // no event or pinned buffer is released while in use
  for (Bucket& b : buckets_)
    for (void* e : {b.ready, b.started, b.done}) (void)cudaEventDestroy(ev(e));
  (void)cudaEventDestroy(ev(step_end_));
  if (copy_stream_ != nullptr) (void)cudaStreamDestroy(st(copy_stream_));
}

void DeviceGradientSync::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_) b.pending = int64_t(b.range.params.size());
  for (auto& [p, r] : ready_) r = false;
  next_launch_ = done_ = 0;
  allreduce_seconds_ = wait_seconds_ = host_wait_seconds_ = staged_seconds_ = 0;
  error_ = nullptr;
}

void DeviceGradientSync::layer_backward_done(Layer& layer) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  for (Parameter* p : params) mark_ready(p);
}

// On the compute thread: the bucket's gradients are final once the compute stream gets here.
void DeviceGradientSync::record_ready(Bucket& b) {
  QSYNC_CUDA_CHECK(cudaEventRecord(ev(b.ready), st(ops_.stream())));
}

void DeviceGradientSync::mark_ready(Parameter* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = bucket_of_.find(p);
  if (it == bucket_of_.end() || ready_[p]) return;
  ready_[p] = true;
  Bucket& b = buckets_[it->second];
  if (--b.pending == 0) record_ready(b);
  launch_ready_buckets();
}

void DeviceGradientSync::launch_ready_buckets() {
  bool launched = false;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    queue_.push_back(next_launch_++);
    launched = true;
  }
  if (launched) cv_.notify_all();
}

void DeviceGradientSync::sum_bucket(Bucket& b) {
  float* data = grads_ + b.range.offset;
  if (nccl_ != nullptr) {
    nccl_->all_reduce_sum_async(data, b.range.count, b.ready, b.started, b.done);
    return;
  }
  const size_t index = size_t(&b - buckets_.data());
  void* host = pinned_[index].data();
  const size_t bytes = size_t(b.range.count) * sizeof(float);
  const double t0 = now_seconds();
  QSYNC_CUDA_CHECK(cudaStreamWaitEvent(st(copy_stream_), ev(b.ready), 0));
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(host, data, bytes, cudaMemcpyDeviceToHost, st(copy_stream_)));
  QSYNC_CUDA_CHECK(cudaStreamSynchronize(st(copy_stream_)));
  gloo_.all_reduce_sum(static_cast<float*>(host), b.range.count);
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(data, host, bytes, cudaMemcpyHostToDevice, st(copy_stream_)));
  QSYNC_CUDA_CHECK(cudaEventRecord(ev(b.done), st(copy_stream_)));
  staged_seconds_ += now_seconds() - t0;
}

void DeviceGradientSync::comm_loop() {
  try {
    cuda_set_device(ops_.device().index);  // CUDA's current device is per host thread
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t index = queue_.front();
    queue_.pop_front();
    Bucket& b = buckets_[index];
    lock.unlock();
    std::exception_ptr error;
    try {
      sum_bucket(b);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) error_ = error;
    ++done_;
    cv_.notify_all();
  }
}

void DeviceGradientSync::finish_step() {
  const double t0 = now_seconds();
  QSYNC_CUDA_CHECK(cudaEventRecord(ev(step_end_), st(ops_.stream())));
  std::unique_lock<std::mutex> lock(mutex_);
  for (Bucket& b : buckets_)
    if (b.pending > 0) {  // parameters no backward reached: their (zero) gradients as they are
      for (Parameter* q : b.range.params) ready_[q] = true;
      b.pending = 0;
      record_ready(b);
    }
  launch_ready_buckets();
  cv_.wait(lock, [this] { return done_ == buckets_.size() || error_ != nullptr; });
  host_wait_seconds_ = now_seconds() - t0;
  if (error_) std::rethrow_exception(error_);
  for (Bucket& b : buckets_) QSYNC_CUDA_CHECK(cudaStreamWaitEvent(st(ops_.stream()), ev(b.done), 0));
}

void DeviceGradientSync::await_completion() {
  if (buckets_.empty()) return;
  Bucket& last = buckets_.back();
  if (nccl_ != nullptr) {
    for (Bucket& b : buckets_) nccl_->wait_event(b.done, "all_reduce_sum");
    float total = 0, ms = 0;
    for (Bucket& b : buckets_) {
      QSYNC_CUDA_CHECK(cudaEventElapsedTime(&ms, ev(b.started), ev(b.done)));
      total += ms;
    }
    allreduce_seconds_ = double(total) * 1e-3;
  } else {
    QSYNC_CUDA_CHECK(cudaEventSynchronize(ev(last.done)));
    allreduce_seconds_ = staged_seconds_;
  }
  // The device's wait at the sync: from the end of backward to the last bucket's sum (if later).
  float idle = 0;
  QSYNC_CUDA_CHECK(cudaEventElapsedTime(&idle, ev(step_end_), ev(last.done)));
  wait_seconds_ = std::max(host_wait_seconds_, double(idle) * 1e-3);
}

}  // namespace qsync
