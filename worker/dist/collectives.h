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
// Gloo over TCP, connected through the rendezvous store. `timeout` bounds every operation.
// Sets SIGPIPE to SIG_IGN when it still has the default action (Gloo writes with writev, and a
// dead peer must become a CollectiveError, not kill the process). QSYNC_GLOO_HOSTNAME overrides
// the local address Gloo listens on (default: this host's address on the route to MASTER_ADDR).
std::unique_ptr<Collectives> collectives_gloo(Rendezvous& rv, std::chrono::milliseconds timeout);
// NCCL (throws when this build has no CUDA or no device is present).
std::unique_ptr<Collectives> collectives_nccl(Rendezvous& rv, int device);
// "NCCL 2.28.9" (the library loaded), or why there is none.
std::string nccl_version_text();

// A process's place in a job: with more than one rank, the rendezvous and Gloo collectives over
// it (timeout rc.timeout); with one, collectives_local and no rendezvous. The collectives are
// declared last, so they are destroyed before the rendezvous they use.
struct World {
  std::unique_ptr<Rendezvous> rendezvous;
  std::unique_ptr<Collectives> collectives;
};
World world_join(const RendezvousConfig& rc);

}  // namespace qsync
