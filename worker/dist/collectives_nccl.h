// File: worker/dist/collectives_nccl.h
// The NCCL backend of the collectives (built with QSYNC_ENABLE_CUDA). Rank 0 makes the NCCL
// unique id and shares it through the rendezvous store; every rank then joins one communicator
// in NCCL's non-blocking mode, so that each operation can be watched against the rendezvous
// timeout: a peer that dies makes the call abort the communicator and throw CollectiveError
// instead of hanging. Buffers are device memory on `device`.
//
// Two ways to call it:
//   * the Collectives interface: blocking; every call synchronizes the communicator's stream;
//   * the device buckets of worker/dist/gradient_sync_device.h: all_reduce_sum_async enqueues
//     an in-place sum on the communicator's stream after an event of the compute stream and
//     records events around it; wait_event watches a recorded event against the timeout.
#pragma once

#include <chrono>
#include <string>

#include "worker/dist/collectives.h"

struct ncclComm;     // ncclComm_t is ncclComm*
struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace qsync {

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(Rendezvous& rv, int device);
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  const char* backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void all_reduce_sum(float* data, int64_t count) override;
  void all_reduce_sum(double* data, int64_t count) override;
  void broadcast(float* data, int64_t count, int root) override;
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override;
  void barrier() override;

  // Asynchronous: on stream(), wait for `ready` (a cudaEvent_t), record `started`, sum `data`
  // (count floats, device memory) over the ranks in place, record `done`. Returns once NCCL has
  // queued the operation. Any event may be nullptr.
  void all_reduce_sum_async(float* data, int64_t count, void* ready, void* started, void* done);
  // Waits until `done` (a recorded cudaEvent_t) completes, the communicator reports an error, or
  // the timeout passes; the last two abort the communicator and throw CollectiveError.
  void wait_event(void* done, const char* what);
  void* stream() const { return stream_; }  // cudaStream_t
  int device() const { return device_; }

 private:
  void connect(Rendezvous& rv);
  void release();
  std::string where() const;
  void check_cuda(int e, const char* what);
  void check_nccl(int r, const char* what);
  template <typename F>
  void run(const char* op, int64_t count, F&& enqueue);
  void wait_until_done(const char* op, bool stream_work);
  void wait_until_queued(const char* op);
  [[noreturn]] void fail(const char* op, const std::string& why, bool misuse = false);

  int rank_;
  int world_size_;
  int device_;
  std::chrono::milliseconds timeout_;
  CUstream_st* stream_ = nullptr;
  float* scratch_ = nullptr;
  ncclComm* comm_ = nullptr;
  std::string failed_;
};

}  // namespace qsync
