// File: kernels/thread_stack_allowance.h
// Threads that ask for small stacks still start in a process that carries the CUDA libraries.
// civetweb (behind prometheus-cpp's Exposer, as Debian builds it with USE_STACK_SIZE=102400)
// starts its threads with 100 KiB stacks; glibc carves a thread's static TLS out of its stack and
// refuses a stack that cannot hold it, and in a CUDA build libcublasLt alone brings 94 KiB of
// static TLS: every metrics endpoint then failed with "null context when constructing
// CivetServer". thread_stack_allowance.cpp interposes pthread_attr_setstacksize for the whole
// process: a request under 1 MiB gets 1 MiB more; larger requests pass unchanged.
//
// A binary that serves Prometheus metrics calls thread_stack_allowance_link() once: the call
// does nothing at run time but makes the linker keep the interposing definition.
#pragma once

namespace qsync {

void thread_stack_allowance_link();

}  // namespace qsync
