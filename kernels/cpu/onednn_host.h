// File: kernels/cpu/onednn_host.h
// What the host's oneDNN backends (gemm_onednn.cpp, conv_onednn.cpp) share: the process's one
// CPU engine, and per-thread buffers that grow to the largest request and are then reused.
#pragma once

#include <cstddef>

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

}  // namespace qsync
