// File: worker/dist/collectives_nccl.cpp
// NcclCollectives (see collectives_nccl.h): the communicator, the blocking collectives, and the
// asynchronous bucket sum with its watched wait.
#include "worker/dist/collectives_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "worker/dist/collectives.h"
#include "worker/dist/kv_store.h"

namespace qsync {
namespace {

using Clock = std::chrono::steady_clock;

ncclComm_t comm_of(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

NcclCollectives::NcclCollectives(Rendezvous& rv, int device)
    : rank_(rv.config().rank), world_size_(rv.config().world_size), device_(device), timeout_(rv.config().timeout) {
  try {
    connect(rv);
  } catch (...) {
    release();
    throw;
  }
}

NcclCollectives::~NcclCollectives() { release(); }

void NcclCollectives::all_reduce_sum(float* data, int64_t count) {
  run("all_reduce_sum", count, [&] {
    return ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_of(comm_), stream_of(stream_));
  });
}
void NcclCollectives::all_reduce_sum(double* data, int64_t count) {
  run("all_reduce_sum", count, [&] {
    return ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat64, ncclSum, comm_of(comm_), stream_of(stream_));
  });
}
void NcclCollectives::broadcast(float* data, int64_t count, int root) {
  if (root < 0 || root >= world_size_) {
    throw CollectiveError("broadcast root " + std::to_string(root) + " is not a rank: use 0.." +
                          std::to_string(world_size_ - 1));
  }
  run("broadcast", count, [&] {
    return ncclBroadcast(data, data, static_cast<size_t>(count), ncclFloat32, root, comm_of(comm_), stream_of(stream_));
  });
}
void NcclCollectives::all_gather(const uint64_t* in, uint64_t* out, int64_t count) {
  run("all_gather", count, [&] {
    return ncclAllGather(in, out, static_cast<size_t>(count), ncclUint64, comm_of(comm_), stream_of(stream_));
  });
}
void NcclCollectives::barrier() {
  run("barrier", 1, [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_of(comm_), stream_of(stream_)); });
}

void NcclCollectives::all_reduce_sum_async(float* data, int64_t count, void* ready, void* started, void* done) {
  if (!failed_.empty() || comm_ == nullptr)
    throw CollectiveError("nccl all_reduce_sum on " + where() + ": the communicator failed earlier (" + failed_ +
                          ") and cannot be used again: restart the job from a checkpoint");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (ready != nullptr) check_cuda(cudaStreamWaitEvent(stream_of(stream_), static_cast<cudaEvent_t>(ready), 0), "cudaStreamWaitEvent");
  if (started != nullptr) check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(started), stream_of(stream_)), "cudaEventRecord");
  if (count > 0) {
    const ncclResult_t r =
        ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_of(comm_), stream_of(stream_));
    if (r != ncclSuccess && r != ncclInProgress)
      fail("all_reduce_sum", ncclGetErrorString(r), r == ncclInvalidUsage || r == ncclInvalidArgument);
    wait_until_queued("all_reduce_sum");
  }
  if (done != nullptr) check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(done), stream_of(stream_)), "cudaEventRecord");
}

void NcclCollectives::wait_event(void* done, const char* what) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(done));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) fail(what, cudaGetErrorString(e));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_of(comm_), &state);
    if (r != ncclSuccess) fail(what, ncclGetErrorString(r));
    if (state != ncclSuccess && state != ncclInProgress) fail(what, ncclGetErrorString(state));
    if (Clock::now() > deadline) fail(what, "timed out after " + format_duration(timeout_));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Polls until NCCL has queued the last call (non-blocking communicators may return before).
void NcclCollectives::wait_until_queued(const char* op) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_of(comm_), &state);
    if (r != ncclSuccess) fail(op, ncclGetErrorString(r));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(op, ncclGetErrorString(state), state == ncclInvalidUsage || state == ncclInvalidArgument);
    if (Clock::now() > deadline) fail(op, "timed out after " + format_duration(timeout_) + " while queueing");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCollectives::connect(Rendezvous& rv) {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      throw CollectiveError("nccl: no CUDA device is visible to " + where() + " (" +
                            (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                            "): run it on a GPU node or use the gloo backend");
    }
    if (device_ < 0 || device_ >= devices) {
      throw CollectiveError("nccl: device " + std::to_string(device_) + " does not exist on " +
                            where() + ": pick one of 0.." + std::to_string(devices - 1));
    }
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
    check_cuda(cudaMemset(scratch_, 0, sizeof(float)), "cudaMemset");

    const std::string key = rv.scope("nccl") + "unique_id";
    ncclUniqueId id;
    if (rank_ == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      rv.store().set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      std::vector<char> bytes;
      try {
        bytes = rv.store().get(key);
      } catch (const std::exception& err) {
        throw CollectiveError(std::string("nccl: rank 0 did not share its NCCL id: ") + err.what());
      }
      if (bytes.size() != sizeof id.internal) {
        throw CollectiveError("nccl: the NCCL id under '" + key + "' has " +
                              std::to_string(bytes.size()) + " bytes, not " +
                              std::to_string(sizeof id.internal) + ": rank 0 runs another build");
      }
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      fail("ncclCommInitRank", ncclGetErrorString(r),
           r == ncclInvalidUsage || r == ncclInvalidArgument);
    }
    wait_until_done("ncclCommInitRank", false);
  }

void NcclCollectives::release() {
    if (comm_ != nullptr) {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);  // every operation was synchronised: nothing is left to flush
      comm_ = nullptr;
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    stream_ = nullptr;
  }

std::string NcclCollectives::where() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_);
  }

void NcclCollectives::check_cuda(int e_int, const char* what) {
    const auto e = static_cast<cudaError_t>(e_int);
    if (e != cudaSuccess) {
      throw CollectiveError(std::string("nccl: ") + what + " failed on " + where() + " (device " +
                            std::to_string(device_) + "): " + cudaGetErrorString(e));
    }
  }

void NcclCollectives::check_nccl(int r_int, const char* what) {
    const auto r = static_cast<ncclResult_t>(r_int);
    if (r != ncclSuccess) {
      throw CollectiveError(std::string("nccl: ") + what + " failed on " + where() + ": " +
                            ncclGetErrorString(r));
    }
  }

template <typename F>
void NcclCollectives::run(const char* op, int64_t count, F&& enqueue) {
    if (!failed_.empty() || comm_ == nullptr) {
      throw CollectiveError("nccl " + std::string(op) + " on " + where() +
                            ": the communicator failed earlier (" + failed_ +
                            ") and cannot be used again: restart the job from a checkpoint");
    }
    if (count < 0) {
      throw CollectiveError(std::string(op) + ": element count " + std::to_string(count) +
                            " is negative");
    }
    if (count == 0) return;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    const ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) {
      fail(op, ncclGetErrorString(r), r == ncclInvalidUsage || r == ncclInvalidArgument);
    }
    wait_until_done(op, true);
  }

  // Polls the communicator (and the stream) until the work is done, an error shows, or the
  // timeout passes; the last two abort the communicator.
void NcclCollectives::wait_until_done(const char* op, bool stream_work) {
    const auto deadline = Clock::now() + timeout_;
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail(op, ncclGetErrorString(r));
      if (state != ncclSuccess && state != ncclInProgress) {
        const char* detail = ncclGetLastError(comm_);
        const bool usage = state == ncclInvalidUsage || state == ncclInvalidArgument;
        fail(op, std::string(ncclGetErrorString(state)) + (detail && *detail ? " (" : "") +
                     (detail ? detail : "") + (detail && *detail ? ")" : ""), usage);
      }
      if (state == ncclSuccess) {
        if (!stream_work) return;
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) fail(op, cudaGetErrorString(e));
      }
      if (Clock::now() > deadline) fail(op, "timed out after " + format_duration(timeout_));
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // `misuse`: NCCL refused how it was called (e.g. two ranks on one GPU), no peer failed.
[[noreturn]] void NcclCollectives::fail(const char* op, const std::string& why, bool misuse) {
    failed_ = op;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    throw CollectiveError("nccl " + std::string(op) + " failed on " + where() + " (device " +
                          std::to_string(device_) + "): " + why +
                          (misuse ? ": give every rank its own GPU and the same NCCL version"
                                  : ": a peer rank likely died or is unreachable; see the other "
                                    "ranks' logs, then restart the job from a checkpoint"));
  }


std::string nccl_version_text() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<Collectives> collectives_nccl(Rendezvous& rv, int device) {
  return std::make_unique<NcclCollectives>(rv, device);
}

}  // namespace qsync
