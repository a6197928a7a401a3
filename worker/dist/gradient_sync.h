// File: worker/dist/gradient_sync.h
// Bucketed gradient all-reduce that overlaps the backward pass. Parameters are grouped, in the
// reverse of their forward order (the order backward finishes them), into buckets of about
// `bucket_bytes`; since the model keeps its gradients in one flat buffer in that same order
// (worker/model.h), a bucket is one contiguous range of it (alignment padding included: zeros on
// every rank), and every rank of a job, CPU or GPU, forms the same buckets. When a leaf layer's
// backward is done its parameters are marked ready; a bucket whose parameters are all ready is
// handed, in bucket order (fixed, so runs are reproducible), to a communication thread that sums
// it across ranks while backward goes on. finish_step() waits for every bucket: the time spent
// there is the wait at the sync.
//
// Implementations (gradient_sync_create picks one):
//   host     a CPU rank: the range is copied into a bucket buffer, summed over Gloo, copied back
//   device   a GPU rank (worker/dist/gradient_sync_device.h): NCCL sums the range in place on a
//            communication stream after an event of the compute stream (all ranks on GPUs), or
//            the range is staged through pinned host memory and summed over Gloo (a job that
//            mixes CPU and GPU ranks)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker/dist/collectives.h"
#include "worker/layer.h"

namespace qsync {

class Model;

inline constexpr int64_t DEFAULT_BUCKET_BYTES = 25ll << 20;  // 25 MiB, as PyTorch DDP

// One bucket: its parameters and its range of the model's flat gradient buffer (elements).
struct GradientBucket {
  std::vector<Parameter*> params;
  int64_t offset = 0, count = 0;
};
// The buckets of a model: reverse parameter order, a new bucket once one holds bucket_bytes.
std::vector<GradientBucket> gradient_buckets(Model& model, int64_t bucket_bytes);

class GradientSync : public BackwardListener {
 public:
  ~GradientSync() override = default;
  virtual int64_t bucket_count() const = 0;
  virtual void begin_step() = 0;
  // Launches buckets not yet launched (parameters without a backward, e.g. unused), and waits
  // until every bucket's sum is in the gradients (on a device: ordered before the compute
  // stream's next op). Throws CollectiveError when a peer failed.
  virtual void finish_step() = 0;
  // On a device, after the optimizer is enqueued and before the device's synchronize(): waits
  // (within the collective timeout) for the communication to complete, so that a dead peer
  // becomes a CollectiveError rather than a hang. Host: nothing to do.
  virtual void await_completion() {}
  // The step's figures; on a device valid after the device's synchronize().
  virtual double last_wait_seconds() const = 0;       // blocked at the sync
  virtual double last_allreduce_seconds() const = 0;  // communication busy time
};

// The synchronizer of a rank computing on `ops` (the model's): host, or device over NCCL when
// `nccl` is given (every rank is a GPU) or staged over `collectives` (Gloo) otherwise.
std::unique_ptr<GradientSync> gradient_sync_create(Collectives& collectives, Collectives* nccl, Model& model,
                                                   int64_t bucket_bytes);

// The host implementation (CPU ranks).
class HostGradientSync : public GradientSync {
 public:
  HostGradientSync(Collectives& collectives, Model& model, int64_t bucket_bytes);
  ~HostGradientSync() override;
  HostGradientSync(const HostGradientSync&) = delete;
  HostGradientSync& operator=(const HostGradientSync&) = delete;

  int64_t bucket_count() const override { return int64_t(buckets_.size()); }
  void begin_step() override;
  void layer_backward_done(Layer& layer) override;
  void finish_step() override;
  double last_wait_seconds() const override { return wait_seconds_; }
  double last_allreduce_seconds() const override { return allreduce_seconds_; }

 private:
  struct Bucket {
    GradientBucket range;
    std::vector<float> flat;  // (count) the bucket's gradients, contiguous
    int64_t pending = 0;      // params not yet ready this step
  };
  void mark_ready(Parameter* p);
  void copy_in(Bucket& b);
  void launch_ready_buckets();  // under mutex_
  void comm_loop();

  Collectives& collectives_;
  float* grads_;  // the model's flat gradients (host)
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::unordered_map<const Parameter*, bool> ready_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;   // buckets to all-reduce, in order
  size_t next_launch_ = 0;     // buckets [0, next_launch_) were launched this step
  size_t done_ = 0;            // buckets finished this step
  bool stop_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0, allreduce_seconds_ = 0;
  std::thread comm_;
};

}  // namespace qsync
