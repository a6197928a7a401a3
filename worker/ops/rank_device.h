// File: worker/ops/rank_device.h
// The device a rank computes on, chosen by its device class: CPU classes run on the host ops
// (cpu_ops()); GPU classes on a CudaOps of the visible device LOCAL_RANK (device_class_activate
// has selected and checked it). Builds without CUDA refuse GPU classes with a message.
#pragma once

#include <memory>
#include <string>

#include "kernels/device_class.h"
#include "worker/ops/device_ops.h"

namespace qsync {

class RankDevice {
 public:
  // After device_class_activate(c, ...).
  explicit RankDevice(const DeviceClass& c);
  ~RankDevice();
  RankDevice(const RankDevice&) = delete;
  RankDevice& operator=(const RankDevice&) = delete;

  DeviceOps& ops() const { return *ops_; }
  bool is_cuda() const { return owned_ != nullptr; }
  int cuda_device() const { return cuda_device_; }
  // What the device is ("host CPU" or the GPU with its libraries' versions).
  std::string describe() const;
  // The device memory pool's high-water mark since the last reset (GPU ranks; 0 on the host).
  int64_t device_peak_bytes() const;
  void reset_device_peak();

 private:
  DeviceOps* ops_;
  std::unique_ptr<DeviceOps> owned_;
  int cuda_device_ = -1;
};

}  // namespace qsync
