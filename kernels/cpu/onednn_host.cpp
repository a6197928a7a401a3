// File: kernels/cpu/onednn_host.cpp
// The shared oneDNN engine, growing buffers and one-thread parts of the host backends (see
// onednn_host.h).
#include "kernels/cpu/onednn_host.h"

#include <omp.h>

#include <cstdlib>
#include <exception>
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

void run_parts_one_thread_each(int parts, const std::function<void(int)>& part) {
  std::exception_ptr error;
#pragma omp parallel num_threads(parts)
  {
    const int team = omp_get_num_threads();
    omp_set_num_threads(1);  // oneDNN, built and run inside, sees one thread (this task's setting)
    for (int t = omp_get_thread_num(); t < parts; t += team) {
      try {
        part(t);
      } catch (...) {
#pragma omp critical(qsync_onednn_part_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace qsync
