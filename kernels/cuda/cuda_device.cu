// File: kernels/cuda/cuda_device.cu
// CUDA device queries, the CUDA error check, and CudaBuffer (see cuda_device.h).
#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qsync {

int cuda_device_count() {
  // Queried once: the runtime's answer does not change within a process. A missing driver or
  // GPU returns an error (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...), read as 0.
  static const int count = [] {
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error so later runtime calls start clean
      return 0;
    }
    return n;
  }();
  return count;
}

int cuda_device_sm(int device) {
  if (device < 0 || device >= cuda_device_count()) return 0;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

std::string cuda_device_name(int device) {
  if (device < 0 || device >= cuda_device_count()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
}

int cuda_current_device() {
  if (cuda_device_count() == 0) return 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return device;
}

void cuda_set_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cudaSetDevice(" + std::to_string(device) + ") failed: " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e) + " (" + std::to_string(cuda_device_count()) + " visible devices)");
  }
}

std::string cuda_version_text() {
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
  auto text = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "CUDA runtime " + text(runtime) + (driver > 0 ? ", driver " + text(driver) : ", no CUDA driver");
}

void cuda_check_status(int status, const char* what, const char* file, int line) {
  if (status == static_cast<int>(cudaSuccess)) return;
  const auto err = static_cast<cudaError_t>(status);
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

CudaBuffer::CudaBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if (cuda_device_count() == 0)
    throw std::runtime_error("CudaBuffer: no CUDA device; check cuda_device_count() before allocating");
  QSYNC_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

CudaBuffer::~CudaBuffer() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);  // destructors do not throw
}

CudaBuffer::CudaBuffer(CudaBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

CudaBuffer& CudaBuffer::operator=(CudaBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {
void check_copy_size(const char* op, size_t bytes, size_t capacity) {
  if (bytes > capacity)
    throw std::invalid_argument(std::string("CudaBuffer::") + op + ": " + std::to_string(bytes) +
                                " bytes requested but the buffer holds " + std::to_string(capacity) +
                                "; allocate a larger CudaBuffer");
}
}  // namespace

void CudaBuffer::upload(const void* host, size_t bytes) {
  check_copy_size("upload", bytes, bytes_);
  if (bytes == 0) return;
  QSYNC_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
}

void CudaBuffer::download(void* host, size_t bytes) const {
  check_copy_size("download", bytes, bytes_);
  if (bytes == 0) return;
  QSYNC_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
}

void CudaBuffer::fill_zero() {
  if (bytes_ == 0) return;
  QSYNC_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
}

}  // namespace qsync
