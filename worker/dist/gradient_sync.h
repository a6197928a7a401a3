// File: worker/dist/gradient_sync.h
// Bucketed gradient all-reduce that overlaps the backward pass. Parameters are grouped, in the
// reverse of their forward order (the order backward finishes them), into buckets of about
// `bucket_bytes`. When a leaf layer's backward is done its parameters are marked ready; a bucket
// whose parameters are all ready is handed, in bucket order (fixed, so runs are reproducible),
// to a communication thread that all-reduces (sums) its FP32 gradients while backward goes on.
// finish_step() waits for every bucket: the time spent there is the wait at the sync.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker/dist/collectives.h"
#include "worker/layer.h"

namespace qsync {

inline constexpr int64_t DEFAULT_BUCKET_BYTES = 25ll << 20;  // 25 MiB, as PyTorch DDP

class GradientSync : public BackwardListener {
 public:
  GradientSync(Collectives& collectives, const std::vector<Parameter*>& params, int64_t bucket_bytes);
  ~GradientSync() override;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  int64_t bucket_count() const { return int64_t(buckets_.size()); }

  void begin_step();
  void layer_backward_done(Layer& layer) override;
  // Launches buckets not yet launched (parameters without a backward, e.g. unused), waits for all
  // all-reduces and copies the sums back. Throws CollectiveError when a peer failed.
  void finish_step();

  double last_wait_seconds() const { return wait_seconds_; }        // blocked in finish_step
  double last_allreduce_seconds() const { return allreduce_seconds_; }  // comm-thread busy time

 private:
  struct Bucket {
    std::vector<Parameter*> params;
    std::vector<float> flat;  // (sum of numel) the bucket's gradients, contiguous
    int64_t pending = 0;      // params not yet ready this step
  };
  void mark_ready(Parameter* p);
  void launch_ready_buckets();  // under mutex_
  void comm_loop();

  Collectives& collectives_;
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
