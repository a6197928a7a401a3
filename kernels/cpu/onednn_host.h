// File: kernels/cpu/onednn_host.h
// What the host's oneDNN backends (gemm_onednn.cpp, conv_onednn.cpp) share: the process's one
// CPU engine, per-thread buffers that grow to the largest request and are then reused, and a
// team whose threads each run oneDNN alone on a part of one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include <dnnl.hpp>

namespace qsync {

dnnl::engine& onednn_cpu_engine();

// A buffer that grows to the largest request and is then reused: no page faults (and no
// zeroing) in the steady state; 64-byte aligned for the JIT kernels. Its contents are undefined
// after a growth. Held thread_local by its users, one per role.
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  ~GrowingBuffer();
  void* get(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Runs part(t) for every t < parts on a team of `parts` threads, each part on one thread with
// oneDNN seeing one thread (omp_set_num_threads(1) inside: the primitives built and run there
// are single-threaded; their cache keys must say so). Every part runs even where the team comes
// out smaller than asked (OMP_THREAD_LIMIT, say); the first exception a part throws is rethrown
// after the team.
void run_parts_one_thread_each(int parts, const std::function<void(int)>& part);

// The extent of each of `parts` slices of `total`: the even share rounded up to a whole
// `multiple` (a vector of 16, a group of 4 INT8 values), so only the last slice may be short.
inline int64_t slice_extent(int64_t total, int64_t parts, int64_t multiple) {
  return ((total + parts - 1) / parts + multiple - 1) / multiple * multiple;
}

}  // namespace qsync
