// File: worker/ops/cuda/cuda_memory.h
// The device memory of a CUDA rank: tensors are allocated stream-ordered from the device's
// memory pool (cudaMallocAsync / cudaFreeAsync on the rank's compute stream) with the release
// threshold at its maximum, so freed blocks stay in the pool and the next step's tensors reuse
// them: a caching allocator, ordered like the kernels that use the memory (a tensor freed on the
// host while its last kernel is still queued is reused only after that kernel). Every tensor is
// also charged to the rank's MemoryAccount by Tensor::empty, as host tensors are.
//
// Memory read by another stream (the gradient buckets on the communication stream) is never
// freed during a step: parameters and gradients live for the whole run.
//
// Pinned host memory: PinnedBuffer, for the batch upload and the host-visible step results.
#pragma once

#include <cstdint>
#include <string>

#include "worker/device.h"

namespace qsync {

class CudaTensorMemory final : public TensorMemory {
 public:
  // On `device` (made current), allocating on `stream` (a cudaStream_t).
  CudaTensorMemory(int device, void* stream);
  ~CudaTensorMemory() override;
  void* allocate(int64_t bytes, const std::string& what) override;
  void release(void* p, int64_t bytes) override;
  void copy_to_host(void* host, const void* device, int64_t bytes) override;
  void copy_from_host(void* device, const void* host, int64_t bytes) override;

  // The pool's high-water mark of memory handed out (cudaMemPoolAttrUsedMemHigh) and what it
  // holds reserved, in bytes; reset_peak() starts a new high-water mark.
  int64_t used_high_bytes() const;
  int64_t reserved_bytes() const;
  void reset_peak();

 private:
  int device_;
  void* stream_;
  void* pool_;  // cudaMemPool_t
};

// Page-locked host memory (cudaMallocHost): asynchronous copies to and from it overlap the
// device's work.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(int64_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  // Grows (discarding the contents) to at least `bytes`.
  void reserve(int64_t bytes);

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace qsync
