// File: worker/device.h
// Where a tensor's bytes live: host memory, or the memory of one CUDA device (its index among the
// devices this process sees, i.e. after CUDA_VISIBLE_DEVICES). A rank computes on one device;
// its tensors, the op implementation it calls (worker/ops/device_ops.h) and its memory account
// all follow from it.
//
//   Device::host()        "host"
//   Device::cuda(0)       "cuda:0"
#pragma once

#include <cstdint>
#include <string>

namespace qsync {

enum class DeviceType : uint8_t { HOST, CUDA };

struct Device {
  DeviceType type = DeviceType::HOST;
  int index = 0;  // CUDA: the visible device; host: 0

  static constexpr Device host() { return {DeviceType::HOST, 0}; }
  static constexpr Device cuda(int i) { return {DeviceType::CUDA, i}; }
  constexpr bool is_host() const { return type == DeviceType::HOST; }
  std::string name() const { return is_host() ? "host" : "cuda:" + std::to_string(index); }
  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::HOST || a.index == b.index);
  }
};

// Where a device's tensor bytes come from (host: aligned heap; CUDA: the caching allocator of
// worker/ops/cuda/cuda_memory.h). Registered once per device by whoever sets the device up.
class TensorMemory {
 public:
  virtual ~TensorMemory() = default;
  // `what` names the tensor in errors (out of device memory).
  virtual void* allocate(int64_t bytes, const std::string& what) = 0;
  virtual void release(void* p, int64_t bytes) = 0;
  // Synchronous copies between host memory and this memory, ordered after the device's work.
  virtual void copy_to_host(void* host, const void* device, int64_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, int64_t bytes) = 0;
};

// The memory of `d`; throws std::runtime_error naming the device when none is registered (a CUDA
// tensor before the rank's CUDA ops exist, or a build without CUDA).
TensorMemory& tensor_memory_for(const Device& d);
// Registers (or, with nullptr, removes) the memory of a CUDA device. Not thread-safe against
// concurrent allocation on that device: call it before any tensor lives there.
void tensor_memory_register(const Device& d, TensorMemory* memory);

}  // namespace qsync
