// File: worker/ops/rank_device.cpp
// The rank's device from its class (see rank_device.h).
#include "worker/ops/rank_device.h"

#include <stdexcept>

#include "worker/ops/cpu_ops.h"
#if defined(QSYNC_WITH_CUDA)
#include "worker/ops/cuda/cuda_ops.h"
#endif

namespace qsync {

RankDevice::RankDevice(const DeviceClass& c) : ops_(&cpu_ops()) {
  if (c.kind == DeviceKind::CPU) return;
#if defined(QSYNC_WITH_CUDA)
  cuda_device_ = device_class_cuda_device_index();
  owned_ = std::make_unique<CudaOps>(cuda_device_);
  ops_ = owned_.get();
#else
  throw std::runtime_error("device class " + c.name + " is a GPU, but this build has no CUDA: rebuild with "
                           "-DQSYNC_ENABLE_CUDA=ON (the CUDA 13 toolkit, cuDNN 9 and NCCL), or run as a CPU class");
#endif
}

RankDevice::~RankDevice() = default;

std::string RankDevice::describe() const {
#if defined(QSYNC_WITH_CUDA)
  if (auto* cuda = dynamic_cast<const CudaOps*>(ops_)) return cuda->describe();
#endif
  return "host CPU";
}

int64_t RankDevice::device_peak_bytes() const {
#if defined(QSYNC_WITH_CUDA)
  if (auto* cuda = dynamic_cast<CudaOps*>(ops_)) return cuda->memory().used_high_bytes();
#endif
  return 0;
}

void RankDevice::reset_device_peak() {
#if defined(QSYNC_WITH_CUDA)
  if (auto* cuda = dynamic_cast<CudaOps*>(ops_)) cuda->memory().reset_peak();
#endif
}

}  // namespace qsync
