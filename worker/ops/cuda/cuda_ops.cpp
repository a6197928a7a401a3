// File: worker/ops/cuda/cuda_ops.cpp
// CudaOps: construction, memory, copies, the step's synchronize() and its host deliveries,
// deferred checks and CUDA-event op timings.
#include "worker/ops/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>

#include "kernels/cuda/cublaslt_matmul.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/optimizer_cuda.h"
#include "worker/layer.h"

namespace qsync {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

constexpr int64_t ARENA_BYTES = int64_t(1) << 20;  // pinned staging of host deliveries, per arena

}  // namespace

struct CudaOps::Pending {
  // Pinned arenas: a delivery's bytes land at `used` of the last arena; a full arena gets a
  // successor (earlier copies still target the older ones until synchronize()).
  std::vector<PinnedBuffer> arenas;
  int64_t used = 0;
  struct Delivery {
    const char* pinned;
    std::function<void(const void*)> consume;
  };
  std::vector<Delivery> deliveries;
  std::vector<cudaEvent_t> events;
  int next_event = 0;
  struct Timing {
    OpTimer* timer;
    std::string op;
    int start, end;
  };
  std::vector<Timing> timings;

  char* reserve(int64_t bytes) {
    bytes = (bytes + 15) / 16 * 16;
    if (bytes > ARENA_BYTES) throw std::logic_error("CudaOps: a host delivery of more than 1 MiB");
    if (arenas.empty() || used + bytes > arenas.back().bytes()) {
      arenas.emplace_back(ARENA_BYTES);
      used = 0;
    }
    char* p = static_cast<char*>(arenas.back().data()) + used;
    used += bytes;
    return p;
  }
};

CudaOps::CudaOps(int device) : device_(device), sm_(cuda_device_sm(device)), stream_(nullptr), pending_(std::make_unique<Pending>()) {
  if (cuda_device_count() == 0)
    throw std::runtime_error("CudaOps: no CUDA device is visible: run as a CPU device class, or on a GPU node");
  cuda_set_device(device);
  cudaStream_t s = nullptr;
  QSYNC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  memory_ = std::make_unique<CudaTensorMemory>(device, stream_);
  matmul_ = std::make_unique<CudaMatmulEngine>(stream_);
  conv_ = std::make_unique<CudnnConvEngine>(stream_);
  tensor_memory_register(Device::cuda(device), memory_.get());
}

CudaOps::~CudaOps() {
  try {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(as_stream(stream_));
  } catch (...) {
  }
  tensor_memory_register(Device::cuda(device_), nullptr);
  for (void* p : pinned_host_) (void)cudaHostUnregister(p);
  optimizer_.reset();
  conv_.reset();
  matmul_.reset();
  for (cudaEvent_t e : pending_->events) (void)cudaEventDestroy(e);
  pending_->arenas.clear();
  memory_.reset();
  if (stream_ != nullptr) (void)cudaStreamDestroy(as_stream(stream_));
}

std::string CudaOps::describe() const {
  cudaDeviceProp prop{};
  QSYNC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  return std::string(prop.name) + " (sm" + std::to_string(sm_) + ", " + std::to_string(prop.multiProcessorCount) +
         " SMs, " + format_mib(int64_t(prop.totalGlobalMem)) + "), " + cuda_version_text() + ", " +
         cublaslt_version_text() + ", " + cudnn_version_text();
}

void CudaOps::require_here(const Tensor& t, const char* op) const {
  if (t.device() != device())
    throw std::logic_error(std::string("cuda ") + op + ": a tensor lives on " + t.device().name() + ", not " +
                           device().name() + ": a rank computes on one device (copy it there first)");
}

void CudaOps::pin_host(void* p, int64_t bytes) {
  if (p == nullptr || bytes <= 0) return;
  QSYNC_CUDA_CHECK(cudaHostRegister(p, size_t(bytes), cudaHostRegisterDefault));
  pinned_host_.push_back(p);
}

void CudaOps::unpin_host(void* p) {
  for (auto it = pinned_host_.begin(); it != pinned_host_.end(); ++it)
    if (*it == p) {
      QSYNC_CUDA_CHECK(cudaHostUnregister(p));
      pinned_host_.erase(it);
      return;
    }
}

Tensor CudaOps::scratch(int64_t bytes, const std::string& what) {
  return Tensor::empty({(bytes + 3) / 4}, Precision::FP32, nullptr, what, device());
}

void CudaOps::fill_zero(Tensor& t) {
  require_here(t, "fill_zero");
  QSYNC_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, size_t(t.bytes()), as_stream(stream_)));
}

void CudaOps::copy(const Tensor& src, Tensor& dst) {
  if (src.bytes() != dst.bytes())
    throw std::invalid_argument("copy: " + std::to_string(src.bytes()) + " bytes into a tensor of " +
                                std::to_string(dst.bytes()));
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    if (!t->on_host()) require_here(*t, "copy");
  // Unified addressing tells the direction; a pageable host side makes the call wait for it.
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), size_t(src.bytes()), cudaMemcpyDefault, as_stream(stream_)));
}

void CudaOps::on_host(const void* device, int64_t bytes, std::function<void(const void*)> consume) {
  char* pinned = pending_->reserve(bytes);
  QSYNC_CUDA_CHECK(cudaMemcpyAsync(pinned, device, size_t(bytes), cudaMemcpyDeviceToHost, as_stream(stream_)));
  pending_->deliveries.push_back({pinned, std::move(consume)});
}

void CudaOps::deliver_to_host(const void* device, int64_t bytes, void* host) {
  on_host(device, bytes, [host, bytes](const void* p) { std::memcpy(host, p, size_t(bytes)); });
}

TimeMark CudaOps::time_mark() {
  Pending& p = *pending_;
  if (p.next_event == int(p.events.size())) {
    cudaEvent_t e = nullptr;
    QSYNC_CUDA_CHECK(cudaEventCreate(&e));
    p.events.push_back(e);
  }
  const int index = p.next_event++;
  QSYNC_CUDA_CHECK(cudaEventRecord(p.events[size_t(index)], as_stream(stream_)));
  return {0.0, index};
}

void CudaOps::record_time(OpTimer& timer, const std::string& op, const TimeMark& start, const TimeMark& end) {
  pending_->timings.push_back({&timer, op, start.event, end.event});
}

void CudaOps::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(as_stream(stream_));
  Pending& p = *pending_;
  std::exception_ptr first;
  if (e == cudaSuccess) {
    for (Pending::Delivery& d : p.deliveries) {
      try {
        d.consume(d.pinned);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    for (const Pending::Timing& t : p.timings) {
      float ms = 0.0f;
      QSYNC_CUDA_CHECK(cudaEventElapsedTime(&ms, p.events[size_t(t.start)], p.events[size_t(t.end)]));
      t.timer->record(t.op, double(ms) * 1e-3);
    }
  }
  p.deliveries.clear();
  p.timings.clear();
  p.next_event = 0;
  if (p.arenas.size() > 1) p.arenas.erase(p.arenas.begin(), p.arenas.end() - 1);
  p.used = 0;
  QSYNC_CUDA_CHECK(e);  // a kernel's fault surfaces here, with its name
  if (first) std::rethrow_exception(first);
}

}  // namespace qsync
