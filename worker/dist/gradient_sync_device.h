// File: worker/dist/gradient_sync_device.h
// The gradient sync of a GPU rank (see worker/dist/gradient_sync.h for the bucket scheme). Each
// bucket is a range of the model's flat device gradients, and a bucket whose parameters are ready
// gets an event recorded on the compute stream (from the compute thread, as backward reaches
// it). A communication thread takes the buckets in order and, per transport:
//   NCCL (every rank on a GPU)  enqueues, on the communicator's stream, a wait for the bucket's
//                               event and an in-place ncclAllReduce of the range; events around
//                               it time the communication and mark it done;
//   staged over Gloo (a job     copies the range into a pinned host bucket on a copy stream after
//   mixing CPU and GPU ranks)   the event, waits for it, sums it over Gloo on the host (the same
//                               ring as the CPU ranks' host buckets: same bucket layout), copies
//                               it back and records the bucket's done event.
// finish_step() waits on the host only until every bucket is enqueued (NCCL) or summed (Gloo),
// then makes the compute stream wait for the buckets' done events: the optimizer runs after the
// sums without a host round trip. await_completion() then watches the NCCL events against the
// collective timeout, so a dead peer ends in a CollectiveError rather than a hang.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "worker/dist/gradient_sync.h"

namespace qsync {

class CudaOps;
class NcclCollectives;
class PinnedBuffer;

class DeviceGradientSync : public GradientSync {
 public:
  // `nccl`: an NcclCollectives (all ranks on GPUs), or nullptr to stage over `gloo`.
  DeviceGradientSync(Collectives& gloo, Collectives* nccl, Model& model, int64_t bucket_bytes);
  ~DeviceGradientSync() override;
  DeviceGradientSync(const DeviceGradientSync&) = delete;
  DeviceGradientSync& operator=(const DeviceGradientSync&) = delete;

  int64_t bucket_count() const override { return int64_t(buckets_.size()); }
  void begin_step() override;
  void layer_backward_done(Layer& layer) override;
  void finish_step() override;
  void await_completion() override;
  double last_wait_seconds() const override { return wait_seconds_; }
  double last_allreduce_seconds() const override { return allreduce_seconds_; }
  const char* transport() const { return nccl_ != nullptr ? "nccl" : "gloo (pinned host buckets)"; }

 private:
  struct Bucket {
    GradientBucket range;
    int64_t pending = 0;
    void* ready = nullptr;    // cudaEvent_t on the compute stream
    void* started = nullptr;  // on the communication stream
    void* done = nullptr;
  };
  void mark_ready(Parameter* p);
  void record_ready(Bucket& b);
  void launch_ready_buckets();  // under mutex_
  void comm_loop();
  void sum_bucket(Bucket& b);   // on the communication thread

  Collectives& gloo_;
  NcclCollectives* nccl_;
  CudaOps& ops_;
  float* grads_;          // the model's flat gradients (device)
  void* copy_stream_ = nullptr;  // cudaStream_t of the staged transport
  void* step_end_ = nullptr;     // cudaEvent_t: the compute stream after backward
  std::vector<Bucket> buckets_;
  std::vector<PinnedBuffer> pinned_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::unordered_map<const Parameter*, bool> ready_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t next_launch_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0, allreduce_seconds_ = 0, host_wait_seconds_ = 0, staged_seconds_ = 0;
  std::thread comm_;
};

}  // namespace qsync
