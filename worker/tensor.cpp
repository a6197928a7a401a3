// File: worker/tensor.cpp
// Tensor storage (aligned, accounted, on the host or a registered device), the registry of
// device memories, and the memory account.
#include "worker/tensor.h"

#include <malloc.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

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

namespace {

std::mutex& memories_mutex() {
  static std::mutex m;
  return m;
}
std::map<int, TensorMemory*>& cuda_memories() {
  static std::map<int, TensorMemory*> m;
  return m;
}

// Training allocates the same activation and workspace buffers every step. glibc serves large
// requests with fresh mmaps and unmaps them on free (its mmap threshold cannot be raised past
// 32 MiB), so every step would page-fault its activations in again (~400 minor faults a step).
// Freed host blocks of 64 KiB and more are kept here, by rounded size, and handed to the next
// request of that size: in the steady state a step touches only pages it touched before.
// Bounded: past HOST_CACHE_LIMIT cached bytes the block is freed instead (eval batches and
// one-off sizes do not pin memory forever).
constexpr size_t HOST_CACHE_MIN = size_t(64) << 10;
constexpr size_t HOST_CACHE_LIMIT = size_t(1) << 30;

size_t host_block_bytes(int64_t bytes) {
  const size_t b = bytes <= 0 ? 64 : size_t(bytes);
  const size_t unit = b >= HOST_CACHE_MIN ? size_t(4096) : size_t(64);
  return (b + unit - 1) / unit * unit;
}

class HostBlockCache {
 public:
  void* take(size_t bytes) {
    if (bytes >= HOST_CACHE_MIN) {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void give(void* p, size_t bytes) {
    if (bytes >= HOST_CACHE_MIN) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= HOST_CACHE_LIMIT) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

HostBlockCache& host_block_cache() {
  static HostBlockCache* cache = [] {
    // Other allocations (smaller blocks, the libraries' own buffers) come from glibc's heap: serve
    // them from the heap up to glibc's largest mmap threshold (32 MiB) and keep freed top memory
    // there, or they are unmapped and faulted in again on the next step.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return new HostBlockCache();  // never destroyed: tensors outlive statics
  }();
  return *cache;
}

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // <linux/mman.h>; older headers lack the name
#endif

// glibc's heaps of the threads' arenas: mappings of at most 64 MiB (HEAP_MAX_SIZE, twice the
// largest mmap threshold) at addresses aligned to that size, written from the start upwards.
constexpr uintptr_t THREAD_ARENA_HEAP_BYTES = uintptr_t(64) << 20;

// A heap's holes: a block freed in the middle of a heap may hold pages nobody wrote (a buffer
// only partly used), which the next blocks carved from it touch first. Asks the kernel to
// populate every page (pages already there are left as they are) of the main arena's [heap]
// when `main_heap`, and of each thread-arena heap that holds one of `blocks`: the writable
// anonymous mapping around the block, within its aligned 64 MiB. A thread arena's other heaps
// (it starts one more when one is full) keep their holes. Linux 5.14 and later; elsewhere madvise
// refuses and the holes keep faulting, which is all it costs.
void populate_heaps(bool main_heap, const std::vector<char*>& blocks) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return;
  std::vector<uintptr_t> done;  // the 64 MiB windows populated
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long begin = 0, end = 0, inode = 0;
    char perms[8] = {};
    int path = 0;
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &begin, &end, perms, &inode, &path) != 4) continue;
    if (std::strncmp(perms, "rw", 2) != 0) continue;
    if (std::strncmp(line + path, "[heap]", 6) == 0) {
      if (main_heap) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
      continue;
    }
    if (inode != 0 || (line[path] != '\0' && line[path] != '\n')) continue;  // a file or a named mapping
    for (char* block : blocks) {
      const auto at = reinterpret_cast<uintptr_t>(block);
      const uintptr_t heap = at & ~(THREAD_ARENA_HEAP_BYTES - 1);
      if (at < begin || at >= end || std::find(done.begin(), done.end(), heap) != done.end()) continue;
      done.push_back(heap);
      const uintptr_t lo = std::max<uintptr_t>(begin, heap), hi = std::min<uintptr_t>(end, heap + THREAD_ARENA_HEAP_BYTES);
      madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
    }
  }
  std::fclose(maps);
}

// One thread's part of host_heap_prefault: blocks under the mmap threshold (so from the thread's
// arena, not fresh mmaps), each page written; then the holes of the heaps they came from (and
// of the main [heap] on the calling thread); then the blocks freed in reverse, so they merge back
// into the top chunk.
void prefault_this_thread(size_t bytes, bool main_heap) {
  constexpr size_t BLOCK = size_t(4) << 20, PAGE = 4096;
  std::vector<char*> blocks;
  for (size_t done = 0; done < bytes; done += BLOCK) {
    char* p = static_cast<char*>(std::malloc(BLOCK));
    if (p == nullptr) break;  // nothing to gain then: the steady state will fault, not fail
    for (size_t i = 0; i < BLOCK; i += PAGE) p[i] = 0;
    asm volatile("" : : "r"(p) : "memory");  // the writes are the point: keep them and the malloc
    blocks.push_back(p);
  }
  populate_heaps(main_heap, blocks);
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
}

}  // namespace

void host_heap_prefault(size_t bytes) {
  host_block_cache();  // its mallopt settings first: the freed top must not be trimmed
  prefault_this_thread(bytes, true);
#pragma omp parallel
  {
    if (omp_get_thread_num() != 0) prefault_this_thread(bytes, false);
  }
}

Tensor::Storage::~Storage() {
  if (memory != nullptr) memory->release(ptr, bytes);
  else host_block_cache().give(ptr, host_block_bytes(bytes));
  if (account) account->release(bytes);
}

TensorMemory& tensor_memory_for(const Device& d) {
  std::lock_guard<std::mutex> lock(memories_mutex());
  const auto it = cuda_memories().find(d.index);
  if (d.is_host() || it == cuda_memories().end())
    throw std::runtime_error("no memory is set up for device " + d.name() +
                             (d.is_host() ? " (host tensors use the heap)"
                                          : ": create the rank's CUDA ops (worker/ops/cuda/cuda_ops.h) before "
                                            "allocating there, or run as a CPU device class"));
  return *it->second;
}

void tensor_memory_register(const Device& d, TensorMemory* memory) {
  if (d.is_host()) throw std::invalid_argument("tensor_memory_register: host memory is the heap, not registered");
  std::lock_guard<std::mutex> lock(memories_mutex());
  if (memory == nullptr) cuda_memories().erase(d.index);
  else cuda_memories()[d.index] = memory;
}

Tensor Tensor::empty(const Shape& shape, Precision p, MemoryAccount* account, const std::string& what, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("tensor " + what + ": negative dimension in " + shape_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.precision_ = p;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->device = device;
  const int64_t bytes = t.bytes();
  TensorMemory* memory = device.is_host() ? nullptr : &tensor_memory_for(device);
  if (account) account->charge(bytes, what);
  try {
    if (memory != nullptr) {
      t.storage_->ptr = memory->allocate(bytes, what);
    } else {
      t.storage_->ptr = host_block_cache().take(host_block_bytes(bytes));
    }
  } catch (...) {
    if (account) account->release(bytes);
    throw;
  }
  t.storage_->account = account;
  t.storage_->bytes = bytes;
  t.storage_->memory = memory;
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
  if (!on_host())
    throw std::logic_error("tensor " + shape_string(shape_) + " lives on " + device().name() +
                           ": read it through its device's ops (copy it to a host tensor first)");
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

Tensor Tensor::view(int64_t element_offset, const Shape& s) const {
  if (element_offset < 0 || element_offset + shape_numel(s) > numel())
    throw std::invalid_argument("view of " + shape_string(s) + " at element " + std::to_string(element_offset) +
                                " lies outside " + shape_string(shape_));
  Tensor t = *this;
  t.shape_ = s;
  t.offset_ = offset_ + element_offset * precision_bytes(precision_);
  return t;
}

Tensor Tensor::with_precision(Precision p) const {
  if (precision_bytes(p) != precision_bytes(precision_))
    throw std::invalid_argument(std::string("cannot read a ") + precision_name(precision_) + " tensor as " +
                                precision_name(p) + ": element sizes differ");
  Tensor t = *this;
  t.precision_ = p;
  return t;
}

Tensor Tensor::clone(MemoryAccount* account, const std::string& what) const {
  if (!on_host())
    throw std::logic_error("clone of a tensor on " + device().name() + ": copy device tensors through their ops");
  Tensor t = empty(shape_, precision_, account, what);
  std::memcpy(t.data(), data(), size_t(bytes()));
  t.scale_mode = scale_mode;
  t.scales = scales;
  return t;
}

Tensor tensor_to_host(const Tensor& t) {
  if (!t.defined() || t.on_host()) return t;
  Tensor h = Tensor::empty(t.shape(), t.precision(), nullptr, "host copy");
  tensor_memory_for(t.device()).copy_to_host(h.data(), t.data(), t.bytes());
  h.scale_mode = t.scale_mode;
  if (t.scales) h.scales = std::make_shared<Tensor>(tensor_to_host(*t.scales));
  return h;
}

void tensor_copy_from_host(const Tensor& src, Tensor& dst) {
  if (!src.on_host()) throw std::invalid_argument("tensor_copy_from_host: the source lives on " + src.device().name());
  if (src.bytes() != dst.bytes())
    throw std::invalid_argument("tensor_copy_from_host: " + std::to_string(src.bytes()) + " bytes into " +
                                std::to_string(dst.bytes()));
  if (dst.on_host()) std::memcpy(dst.data(), src.data(), size_t(src.bytes()));
  else tensor_memory_for(dst.device()).copy_from_host(dst.data(), src.data(), src.bytes());
}

std::shared_ptr<Tensor> Tensor::host_scales(const std::vector<float>& values) {
  auto s = std::make_shared<Tensor>(empty({int64_t(values.size())}, Precision::FP32, nullptr, "scales"));
  if (!values.empty()) std::memcpy(s->data(), values.data(), values.size() * sizeof(float));
  return s;
}

}  // namespace qsync
