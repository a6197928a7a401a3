// File: kernels/thread_stack_allowance.cpp
// The pthread_attr_setstacksize interposer (see thread_stack_allowance.h).
#include "kernels/thread_stack_allowance.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>
#include <cstddef>

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (next == nullptr) return ENOSYS;
  constexpr size_t TLS_ALLOWANCE = size_t(1) << 20;
  return next(attr, size < TLS_ALLOWANCE ? size + TLS_ALLOWANCE : size);
}

namespace qsync {

void thread_stack_allowance_link() {}

}  // namespace qsync
