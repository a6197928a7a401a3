// File: worker/tensor.cpp
// Tensor storage (aligned, accounted) and the memory account.
#include "worker/tensor.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qsync {

MemoryAccount::MemoryAccount(int64_t budget_bytes, std::string owner) : budget_(budget_bytes), owner_(std::move(owner)) {}

std::string format_mib(int64_t bytes) {
  char buf[64];
  const double mib = double(bytes) / (1024.0 * 1024.0);
  std::snprintf(buf, sizeof buf, mib >= 100 ? "%.0f MiB" : "%.1f MiB", mib);
  return buf;
}

void MemoryAccount::charge(int64_t bytes, const std::string& what) {
  const int64_t now = current_.fetch_add(bytes) + bytes;
  if (budget_ > 0 && now > budget_) {
    current_.fetch_sub(bytes);
    throw MemoryBudgetError("plan needs more than " + format_mib(now) + " on " + owner_ + ", budget is " +
                            format_mib(budget_) + " (while allocating " + format_mib(bytes) + " for " + what +
                            "); lower the batch, choose lower precisions, or raise the memory budget");
  }
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void MemoryAccount::release(int64_t bytes) { current_.fetch_sub(bytes); }

Tensor::Storage::~Storage() {
  std::free(ptr);
  if (account) account->release(bytes);
}

namespace {

// Training allocates the same large activation buffers every step. glibc serves large requests
// with fresh mmaps and returns them on free, so every step would page-fault its activations in
// again; keeping freed memory in the heap lets the next step reuse it.
void keep_freed_memory_for_reuse() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what) {
  keep_freed_memory_for_reuse();
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("tensor " + what + ": negative dimension in " + shape_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.precision_ = p;
  t.storage_ = std::make_shared<Storage>();
  const int64_t bytes = t.bytes();
  if (account) account->charge(bytes, what);
  t.storage_->account = account;
  t.storage_->bytes = bytes;
  const size_t aligned = (size_t(bytes) + 63) / 64 * 64;
  t.storage_->ptr = std::aligned_alloc(64, aligned == 0 ? 64 : aligned);
  if (t.storage_->ptr == nullptr) throw std::bad_alloc();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what) {
  Tensor t = empty(shape, p, account, what);
  std::memset(t.data(), 0, size_t(t.bytes()));
  return t;
}

float* Tensor::f32() {
  if (precision_ != Precision::FP32)
    throw std::logic_error(std::string("tensor is ") + precision_name(precision_) + ", not fp32");
  return as<float>();
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }

Tensor Tensor::reshape(const Shape& s) const {
  if (shape_numel(s) != numel())
    throw std::invalid_argument("cannot reshape " + shape_string(shape_) + " to " + shape_string(s));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::prefix(const Shape& s) const {
  if (shape_numel(s) > numel())
    throw std::invalid_argument("prefix " + shape_string(s) + " is larger than " + shape_string(shape_));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::clone(MemoryAccount* account, const std::string& what) const {
  Tensor t = empty(shape_, precision_, account, what);
  std::memcpy(t.data(), data(), size_t(bytes()));
  t.scale_mode = scale_mode;
  t.scales = scales;
  return t;
}

}  // namespace qsync
