// File: kernels/cpu/onednn_host.cpp
// The shared oneDNN engine and growing buffers of the host backends (see onednn_host.h).
#include "kernels/cpu/onednn_host.h"

#include <cstdlib>
#include <new>

namespace qsync {

dnnl::engine& onednn_cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

GrowingBuffer::~GrowingBuffer() { std::free(data_); }

void* GrowingBuffer::get(size_t bytes) {
  if (bytes > size_) {
    std::free(data_);
    data_ = nullptr;
    size_ = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, size_);
    if (data_ == nullptr) {
      size_ = 0;
      throw std::bad_alloc();
    }
  }
  return data_;
}

}  // namespace qsync
