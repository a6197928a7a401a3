// File: worker/dist/collectives.h
// Collective communication behind one interface, two backends: Gloo (TCP; the CPU backend) and
// NCCL (GPU; built with QSYNC_ENABLE_CUDA, run where a GPU exists). Operations are blocking and
// must be called in the same order on every rank. A peer that dies makes the call throw
// CollectiveError within the configured timeout instead of hanging.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/dist/rendezvous.h"

namespace qsync {

class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual const char* backend() const = 0;  // "gloo", "nccl", "local"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = sum over ranks of data[i]. Host memory for gloo, device memory for nccl.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  virtual void all_reduce_sum(double* data, int64_t count) = 0;
  virtual void broadcast(float* data, int64_t count, int root) = 0;
  // out has world_size * count elements; rank r's `in` lands at out[r * count].
  virtual void all_gather(const uint64_t* in, uint64_t* out, int64_t count) = 0;
  virtual void barrier() = 0;
};

// A single-rank stand-in: every collective is the identity.
std::unique_ptr<Collectives> collectives_local();
// The scheduling policy of Gloo's event-loop thread, which shares the rank's CPUs with the thread
// that computes (collectives_gloo.cpp has the measurements behind both choices).
enum class GlooLoopPolicy {
  // SCHED_IDLE: the loop thread runs only where no compute thread wants the CPU, so it never
  // spins a whole scheduler slice while a preempted compute thread holds the connection's lock.
  // For data-parallel training and profiling: steps of milliseconds, a few collectives each.
  kSchedIdle,
  // SCHED_BATCH: a fair share of the CPU, but a wake-up never preempts; a small all-reduce on an
  // idle pair in 85 us against kSchedIdle's 107 (medians). For latency-bound callers:
  // tensor-parallel decoding (a dozen small all-reduces a token).
  kSchedBatch,
};
const char* gloo_loop_policy_name(GlooLoopPolicy p);  // "SCHED_IDLE", "SCHED_BATCH"

// Gloo over TCP, connected through the rendezvous store. `timeout` bounds every operation; the
// event-loop thread runs `loop`. Sets SIGPIPE to SIG_IGN when it still has the default action
// (Gloo writes with writev, and a dead peer must become a CollectiveError, not kill the process).
// QSYNC_GLOO_HOSTNAME overrides the local address Gloo listens on (default: this host's address
// on the route to MASTER_ADDR).
std::unique_ptr<Collectives> collectives_gloo(Rendezvous& rv, std::chrono::milliseconds timeout, GlooLoopPolicy loop);
// NCCL (throws when this build has no CUDA or no device is present).
std::unique_ptr<Collectives> collectives_nccl(Rendezvous& rv, int device);
// "NCCL 2.28.9" (the library loaded), or why there is none.
std::string nccl_version_text();

// A process's place in a job: with more than one rank, the rendezvous and Gloo collectives over
// it (timeout rc.timeout, event loop `loop`); with one, collectives_local and no rendezvous. The
// collectives are declared last, so they are destroyed before the rendezvous they use.
struct World {
  std::unique_ptr<Rendezvous> rendezvous;
  std::unique_ptr<Collectives> collectives;
};
World world_join(const RendezvousConfig& rc, GlooLoopPolicy loop);

}  // namespace qsync
