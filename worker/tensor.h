// File: worker/tensor.h
// Tensors of the training engine and the memory account that every allocation is charged to.
// A tensor owns (shares) a 64-byte aligned host buffer, knows its shape (batch first) and its
// precision (from the kernels' traits table), and carries its scales when INT8/FP8.
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

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized / zero-filled storage of shape (batch first) in precision p, charged to `account`
  // (nullptr: not accounted, e.g. data loader staging).
  static Tensor empty(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what = "tensor");
  static Tensor zeros(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what = "tensor");

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  Precision precision() const { return precision_; }
  int64_t bytes() const { return numel() * precision_bytes(precision_); }

  void* data() { return storage_ ? storage_->ptr : nullptr; }
  const void* data() const { return storage_ ? storage_->ptr : nullptr; }
  template <class T> T* as() { return static_cast<T*>(data()); }
  template <class T> const T* as() const { return static_cast<const T*>(data()); }
  // The FP32 view; throws if the tensor is not FP32.
  float* f32();
  const float* f32() const;

  // Same storage, another shape with the same element count.
  Tensor reshape(const Shape& s) const;
  // A view of the first shape_numel(s) elements (same storage, same scales), e.g. the first rows.
  Tensor prefix(const Shape& s) const;
  // A copy in fresh storage charged to `account`.
  Tensor clone(MemoryAccount* account, const std::string& what = "tensor") const;

  // INT8 / FP8 tensors: scale per tensor (one value) or per channel (one per leading row).
  ScaleMode scale_mode = ScaleMode::NONE;
  std::vector<float> scales;

 private:
  struct Storage {
    void* ptr = nullptr;
    int64_t bytes = 0;
    MemoryAccount* account = nullptr;
    ~Storage();
  };
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Precision precision_ = Precision::FP32;
};

}  // namespace qsync
