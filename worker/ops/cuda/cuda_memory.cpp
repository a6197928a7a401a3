// File: worker/ops/cuda/cuda_memory.cpp
// The stream-ordered caching allocator of a CUDA rank, and pinned host buffers.
#include "worker/ops/cuda/cuda_memory.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "kernels/cuda/cuda_device.h"
#include "worker/tensor.h"

namespace qsync {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

CudaTensorMemory::CudaTensorMemory(int device, void* stream) : device_(device), stream_(stream), pool_(nullptr) {
  cuda_set_device(device);
  cudaMemPool_t pool = nullptr;
  QSYNC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  // Keep freed memory in the pool (no release at synchronization points): the caching.
  uint64_t threshold = UINT64_MAX;
  QSYNC_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  pool_ = pool;
}

CudaTensorMemory::~CudaTensorMemory() = default;

void* CudaTensorMemory::allocate(int64_t bytes, const std::string& what) {
  void* p = nullptr;
  const size_t n = bytes <= 0 ? 256 : (size_t(bytes) + 255) / 256 * 256;  // 256-byte granules (cuBLASLt, cuDNN)
  const cudaError_t e = cudaMallocAsync(&p, n, as_stream(stream_));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    throw MemoryBudgetError("out of device memory on cuda:" + std::to_string(device_) + " allocating " +
                            format_mib(bytes) + " for " + what + " (" + cudaGetErrorString(e) + "; " +
                            format_mib(int64_t(free_bytes)) + " free of " + format_mib(int64_t(total)) +
                            "): lower the batch or choose lower precisions");
  }
  return p;
}

void CudaTensorMemory::release(void* p, int64_t bytes) {
  (void)bytes;
  if (p != nullptr) (void)cudaFreeAsync(p, as_stream(stream_));  // a destructor path: never throws
}

void CudaTensorMemory::copy_to_host(void* host, const void* device, int64_t bytes) {
  if (bytes <= 0) return;
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(host, device, size_t(bytes), cudaMemcpyDeviceToHost, as_stream(stream_)));
  QSYNC_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaTensorMemory::copy_from_host(void* device, const void* host, int64_t bytes) {
  if (bytes <= 0) return;
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(device, host, size_t(bytes), cudaMemcpyHostToDevice, as_stream(stream_)));
  QSYNC_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));  // the host buffer may be reused at once
}

int64_t CudaTensorMemory::used_high_bytes() const {
  uint64_t v = 0;
  QSYNC_CUDA_CHECK(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrUsedMemHigh, &v));
  return int64_t(v);
}

int64_t CudaTensorMemory::reserved_bytes() const {
  uint64_t v = 0;
  QSYNC_CUDA_CHECK(cudaMemPoolGetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrReservedMemCurrent, &v));
  return int64_t(v);
}

void CudaTensorMemory::reset_peak() {
  uint64_t zero = 0;
  QSYNC_CUDA_CHECK(cudaMemPoolSetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrUsedMemHigh, &zero));
}

PinnedBuffer::PinnedBuffer(int64_t bytes) { reserve(bytes); }

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

void PinnedBuffer::reserve(int64_t bytes) {
  if (bytes <= bytes_) return;
  if (ptr_ != nullptr) QSYNC_CUDA_CHECK(cudaFreeHost(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  QSYNC_CUDA_CHECK(cudaMallocHost(&ptr_, size_t(bytes)));
  bytes_ = bytes;
}

}  // namespace qsync
