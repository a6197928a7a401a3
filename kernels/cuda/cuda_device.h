// File: kernels/cuda/cuda_device.h
// CUDA device queries and a device buffer for tests and benchmarks. A plain C++ header (no
// cuda_runtime.h), so non-CUDA translation units can include it. Every query is safe without a
// driver or a GPU: cuda_device_count() is then 0 and nothing throws or aborts.
//
//   if (qsync::cuda_device_count() == 0) return;   // no GPU here
//   qsync::CudaBuffer d(n * sizeof(float));
//   d.upload(host.data(), n * sizeof(float));
//   kernel(d.as<float>(), ...);
//   std::vector<float> back = d.download_vector<float>(n);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qsync {

// Number of visible CUDA devices; 0 when there is no driver, no GPU, or the runtime fails.
int cuda_device_count();
// Compute capability as major * 10 + minor (75, 80, 89, 90); 0 when `device` does not exist.
int cuda_device_sm(int device);
// "NVIDIA H100 80GB HBM3", or "" when `device` does not exist.
std::string cuda_device_name(int device);
// The device current on this host thread (0 when none is set or there is no device).
int cuda_current_device();
// Makes `device` current on this host thread; throws std::runtime_error naming the device and
// the CUDA error when it cannot (no such device, no driver).
void cuda_set_device(int device);
// "CUDA runtime 13.0, driver 13.0" (versions as major.minor; "no CUDA driver" when absent).
std::string cuda_version_text();

// Throws std::runtime_error("<file>:<line>: <what>: <cudaGetErrorString>") when `status`
// (a cudaError_t, passed as int to keep this header free of CUDA includes) is not cudaSuccess.
void cuda_check_status(int status, const char* what, const char* file, int line);
#define QSYNC_CUDA_CHECK(call) ::qsync::cuda_check_status(static_cast<int>(call), #call, __FILE__, __LINE__)

// Device allocation of `bytes` bytes on the current device; move-only, freed on destruction.
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes);  // throws std::runtime_error when cudaMalloc fails
  ~CudaBuffer();
  CudaBuffer(CudaBuffer&& other) noexcept;
  CudaBuffer& operator=(CudaBuffer&& other) noexcept;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  // Synchronous copies of `bytes` bytes (at most bytes()) from/to host memory.
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  void fill_zero();

  template <typename T>
  static CudaBuffer from_vector(const std::vector<T>& host) {
    CudaBuffer b(host.size() * sizeof(T));
    b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> download_vector(size_t count) const {
    std::vector<T> host(count);
    download(host.data(), count * sizeof(T));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace qsync
