// File: worker/tensor.h
// Tensors of the training engine and the memory account that every allocation is charged to.
// A tensor shares a buffer on one device (worker/device.h: 64-byte aligned host memory, or CUDA
// device memory), knows its shape (batch first), its precision (from the kernels' traits table)
// and its byte offset into the buffer (views: a parameter inside the model's flat buffer), and
// carries its scales when INT8/FP8, in the same memory as its data.
// Host tensors are read and written through data() / f32(); a device tensor's bytes are reached
// only through the ops of its device (worker/ops/device_ops.h): f32() on it throws.
// The account tracks current and peak bytes and enforces the rank's memory budget:
//   MemoryBudgetError: "plan needs 812 MiB on rank 1, budget is 512 MiB (while allocating ...)"
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "planner/model_desc.h"
#include "worker/device.h"

namespace qsync {

class MemoryBudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MemoryAccount {
 public:
  // budget_bytes 0: unlimited. `owner` names the rank in errors ("rank 1").
  explicit MemoryAccount(int64_t budget_bytes = 0, std::string owner = "rank 0");
  void charge(int64_t bytes, const std::string& what);  // throws MemoryBudgetError past the budget
  void release(int64_t bytes);
  int64_t current_bytes() const { return current_.load(); }
  int64_t peak_bytes() const { return peak_.load(); }
  int64_t budget_bytes() const { return budget_; }
  const std::string& owner() const { return owner_; }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  int64_t budget_;
  std::string owner_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

std::string format_mib(int64_t bytes);  // "812 MiB" / "1.5 MiB"

// Writes one byte per page of `bytes` of glibc heap past what is in use, on the calling thread
// and on every thread of its OpenMP team (each allocates from its own arena), then frees it: freed
// top memory stays mapped (the trim threshold is 1 GiB), so blocks that land there later (the
// libraries' per-call buffers, e.g. oneDNN's INT8 GEMM packing) find touched pages instead of
// page-faulting in the middle of a step. The holes (pages of freed blocks that nobody wrote) of
// the main [heap] and of the thread-arena heap each thread's headroom came from are populated
// too, with madvise(MADV_POPULATE_WRITE) where the kernel has it.
// The trainer calls it after every step that faulted (the first, and any whose buffers moved the
// heap's high-water mark).
void host_heap_prefault(size_t bytes);
// The trainer's headroom: more than the libraries' per-call buffers of the zoo models reach.
inline constexpr size_t HOST_HEAP_HEADROOM_BYTES = size_t(16) << 20;

class Tensor;
// `t` itself when it is in host memory, else a synchronous copy into fresh (unaccounted) host
// memory, scales included: for checks, hashes, checkpoints and tests, not for the step's hot path.
Tensor tensor_to_host(const Tensor& t);
// Copies host tensor `src` into `dst` (same byte size) wherever dst lives, synchronously.
void tensor_copy_from_host(const Tensor& src, Tensor& dst);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized storage of shape (batch first) in precision p on `device`, charged to `account`
  // (nullptr: not accounted, e.g. data loader staging and scales).
  static Tensor empty(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what = "tensor",
                      Device device = Device::host());
  // Zero-filled host storage (device tensors are zeroed by their ops: DeviceOps::zeros).
  static Tensor zeros(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what = "tensor");

  bool defined() const { return storage_ != nullptr; }
  // No other tensor shares this buffer: it may be rewritten in place.
  bool sole_owner() const { return storage_ != nullptr && storage_.use_count() == 1; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  Precision precision() const { return precision_; }
  int64_t bytes() const { return numel() * precision_bytes(precision_); }
  Device device() const { return storage_ ? storage_->device : Device::host(); }
  bool on_host() const { return device().is_host(); }

  // The first byte of this tensor (its offset into the shared buffer applied). For device
  // tensors a device pointer: pass it to device code only.
  void* data() { return storage_ ? static_cast<char*>(storage_->ptr) + offset_ : nullptr; }
  const void* data() const { return storage_ ? static_cast<const char*>(storage_->ptr) + offset_ : nullptr; }
  template <class T> T* as() { return static_cast<T*>(data()); }
  template <class T> const T* as() const { return static_cast<const T*>(data()); }
  // The FP32 view of a host tensor; throws if the tensor is not FP32 or not in host memory.
  float* f32();
  const float* f32() const;

  // Same storage, another shape with the same element count.
  Tensor reshape(const Shape& s) const;
  // A view of the first shape_numel(s) elements (same storage, same scales), e.g. the first rows.
  Tensor prefix(const Shape& s) const;
  // A view of shape_numel(s) elements starting `element_offset` elements in (same storage).
  Tensor view(int64_t element_offset, const Shape& s) const;
  // The same bytes read as another precision of the same element size (FP32 data as TF32 GEMM
  // operands: the tensor cores round them).
  Tensor with_precision(Precision p) const;
  // A copy in fresh host storage charged to `account` (host tensors only: device tensors are
  // copied by their ops).
  Tensor clone(MemoryAccount* account, const std::string& what = "tensor") const;

  // INT8 / FP8 tensors: scale per tensor (one value) or per channel (one per leading row), as a
  // 1-D FP32 tensor in the same memory as the data (shared by views and copies of the handle).
  ScaleMode scale_mode = ScaleMode::NONE;
  std::shared_ptr<Tensor> scales;
  // The scales' first value (host or device pointer, like data()), or nullptr.
  const float* scale_data() const { return scales ? scales->as<float>() : nullptr; }
  // Host scales holding `values` (unaccounted).
  static std::shared_ptr<Tensor> host_scales(const std::vector<float>& values);

 private:
  struct Storage {
    void* ptr = nullptr;
    int64_t bytes = 0;
    MemoryAccount* account = nullptr;
    Device device;
    TensorMemory* memory = nullptr;  // nullptr: host heap
    ~Storage();
  };
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Precision precision_ = Precision::FP32;
  int64_t offset_ = 0;  // bytes into storage_->ptr
};

}  // namespace qsync
