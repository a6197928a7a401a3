// File: worker/dist/collectives_gloo.cpp
// The Gloo backend (TCP between the ranks' CPUs) and the single-rank stand-in. Gloo's connection
// data goes through our rendezvous store (adapted to gloo::rendezvous::Store under a fresh key
// prefix per instance). Every operation carries the timeout; any Gloo error becomes a
// CollectiveError that names the operation and says a peer likely died, and leaves the instance
// unusable (later calls throw at once: the ranks are out of step).
// Gloo's TCP device reads and writes on an event-loop thread of its own, beside the thread that
// calls the collective, and the two spin at each other: the loop thread, woken by a peer's data
// while the caller holds the connection's lock (inside its own write), retries epoll_wait without
// sleeping until the lock is free, and the caller, destroying an operation's buffers, yields
// while the loop thread still holds one (~ShareableNonOwningPtr). A rank pinned to one CPU has
// both on that CPU, and a woken thread preempts the running one, so the lock holder waited for
// the next scheduler tick: measured on 2 pinned ranks (Linux 6.18, 250 Hz), every all-reduce from
// 16 bytes to 1 MiB took 4 ms; a CNN step spent 15.6 ms of its 96 ms there. The loop thread runs
// SCHED_BATCH (the same share of the CPU, but a wake-up never preempts): 16 bytes in 86 us, 1 MiB
// in 265 us, the CNN's all-reduce 7.2 ms. That still lets the loop thread in at a scheduler tick
// once the computing thread has used its slice, and when that thread holds the connection's lock
// (inside a send) the loop thread spins the whole slice: `perf sched` showed 4.3 ms runs of it
// while the rank's thread waited, and in 3 to 5 of 8 two-rank MLP jobs every step's 32-byte
// stats all-reduce took 2-3 ms instead of 0.25. SCHED_IDLE never takes the CPU from a thread that
// wants it (interleaved pinned 2-rank jobs, median step, SCHED_BATCH -> SCHED_IDLE: MLP 19.41 ->
// 18.33 ms over 8 jobs each, 21.68 -> 19.98 with 1 MiB buckets over 5; ViT 21.77 and 21.91 over 6,
// CNN 169.5 and 168.0 over 4), but a woken caller preempts an idle-policy thread at once (likely
// before it lets go of a buffer): an idle pair's small all-reduce 85 -> 107 us, tensor-parallel
// decoding 1.91 -> 2.36 ms a token (5 runs each). So the caller chooses (GlooLoopPolicy,
// collectives.h). The device is created on a short-lived thread that takes the policy first: the
// loop thread inherits it, and no thread changes back (leaving SCHED_IDLE needs privileges a pod
// seldom has).
// Gloo writes with writev(), so a dead peer would raise SIGPIPE: collectives_gloo() ignores SIGPIPE
// process-wide when it still has the default action, turning it into an error Gloo reports.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "worker/dist/collectives.h"
#include "worker/dist/kv_store.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;

// gloo::rendezvous::Store over our store, with every key under `prefix`.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(KeyValueStore& store, std::string prefix, milliseconds timeout)
      : store_(store), client_(dynamic_cast<KeyValueClient*>(&store)),
        prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override {
    return client_ ? client_->get(prefix_ + key, timeout_) : store_.get(prefix_ + key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& k : keys) prefixed.push_back(prefix_ + k);
    if (client_) {
      client_->wait(prefixed, timeout);
    } else {
      store_.wait(prefixed);
    }
  }

 private:
  KeyValueStore& store_;
  KeyValueClient* client_;
  std::string prefix_;
  milliseconds timeout_;
};

// The address of this host on the route to the master (a UDP connect sends nothing).
std::string local_address_towards(const RendezvousConfig& c) {
  if (const char* name = std::getenv("QSYNC_GLOO_HOSTNAME"); name != nullptr && *name != '\0') {
    return name;
  }
  const std::string fix = ": set QSYNC_GLOO_HOSTNAME to this host's IP address";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(c.master_addr.c_str(), std::to_string(c.master_port).c_str(),
                               &hints, &found);
  if (rc != 0) {
    throw CollectiveError("gloo: cannot resolve the master address '" + c.master_addr +
                          "': " + ::gai_strerror(rc) + fix);
  }
  std::string address;
  for (addrinfo* ai = found; ai != nullptr && address.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) address = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (address.empty()) {
    throw CollectiveError("gloo: found no local address that routes to " + c.master_addr + fix);
  }
  return address;
}

int sched_policy_of(GlooLoopPolicy p) { return p == GlooLoopPolicy::kSchedIdle ? SCHED_IDLE : SCHED_BATCH; }

// Gloo's TCP device, its event-loop thread running `loop`: created on a thread of that policy,
// which the loop thread inherits (only from SCHED_OTHER or SCHED_BATCH, which any thread may
// leave for either; under a real-time or idle policy the process keeps its own). Where the kernel
// refuses, Gloo runs as before, with a warning on stderr.
std::shared_ptr<gloo::transport::Device> create_tcp_device(const gloo::transport::tcp::attr& attr,
                                                           GlooLoopPolicy loop) {
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr failure;
  std::thread creator([&] {
    const sched_param none{};
    const int current = ::sched_getscheduler(0);
    const bool may_change = current == SCHED_OTHER || current == SCHED_BATCH;
    if (may_change && ::sched_setscheduler(0, sched_policy_of(loop), &none) != 0) {
      const int error = errno;
      std::fprintf(stderr, "qsync: gloo: cannot run the event-loop thread %s (%s); collectives may wait a scheduler "
                   "slice behind computing threads\n", gloo_loop_policy_name(loop), std::strerror(error));
    }
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  creator.join();
  if (failure) std::rethrow_exception(failure);
  return device;
}

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

class GlooCollectives : public Collectives {
 public:
  GlooCollectives(Rendezvous& rv, milliseconds timeout, GlooLoopPolicy loop)
      : rank_(rv.config().rank), world_size_(rv.config().world_size), timeout_(timeout) {
    if (timeout.count() <= 0) throw CollectiveError("gloo: the timeout must be positive");
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
    GlooStore store(rv.store(), rv.scope("gloo"), timeout);
    const std::string hostname = local_address_towards(rv.config());
    run("connect (to every peer, through the rendezvous store)", [&] {
      gloo::transport::tcp::attr attr(hostname.c_str());
      device_ = create_tcp_device(attr, loop);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_size_);
      context->setTimeout(timeout_);
      context->connectFullMesh(store, device_);
      context_ = std::move(context);
    });
  }

  const char* backend() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  void all_reduce_sum(float* data, int64_t count) override { all_reduce(data, count); }
  void all_reduce_sum(double* data, int64_t count) override { all_reduce(data, count); }

  void broadcast(float* data, int64_t count, int root) override {
    check_count(count, "broadcast");
    if (root < 0 || root >= world_size_) {
      throw CollectiveError("broadcast root " + std::to_string(root) + " is not a rank: use 0.." +
                            std::to_string(world_size_ - 1));
    }
    if (count == 0 || world_size_ == 1) return;
    run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(count));
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    check_count(count, "all_gather");
    if (count == 0) return;
    if (world_size_ == 1) {
      std::memmove(out, in, static_cast<size_t>(count) * sizeof(uint64_t));
      return;
    }
    run("all_gather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<uint64_t*>(in), static_cast<size_t>(count));
      opts.setOutput(out, static_cast<size_t>(count) * world_size_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  void barrier() override {
    if (world_size_ == 1) return;
    run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  template <typename T>
  void all_reduce(T* data, int64_t count) {
    check_count(count, "all_reduce_sum");
    if (count == 0 || world_size_ == 1) return;
    run("all_reduce_sum", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(count));
      opts.setReduceFunction(static_cast<ReduceFunction>(&gloo::sum<T>));
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  void check_count(int64_t count, const char* op) const {
    if (count < 0) {
      throw CollectiveError(std::string(op) + ": element count " + std::to_string(count) +
                            " is negative");
    }
  }

  uint32_t next_tag() { return tag_++; }

  std::string where() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_);
  }

  template <typename F>
  void run(const char* op, F&& body) {
    if (!failed_.empty()) {
      throw CollectiveError("gloo " + std::string(op) + " on " + where() +
                            ": this process group failed earlier (" + failed_ +
                            ") and cannot be used again: restart the job from a checkpoint");
    }
    try {
      body();
    } catch (const std::exception& e) {
      failed_ = op;
      throw CollectiveError("gloo " + std::string(op) + " failed on " + where() + " (timeout " +
                            format_duration(timeout_) + "): " + e.what() +
                            ": a peer rank likely died or is unreachable; see the other ranks' "
                            "logs, then restart the job from a checkpoint");
    }
  }

  int rank_;
  int world_size_;
  milliseconds timeout_;
  uint32_t tag_ = 0;
  std::string failed_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

class LocalCollectives : public Collectives {
 public:
  const char* backend() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void broadcast(float*, int64_t, int root) override {
    if (root != 0) {
      throw CollectiveError("broadcast root " + std::to_string(root) +
                            " is not a rank: a single-rank job has only rank 0");
    }
  }
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    if (count > 0) std::memmove(out, in, static_cast<size_t>(count) * sizeof(uint64_t));
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Collectives> collectives_local() { return std::make_unique<LocalCollectives>(); }

const char* gloo_loop_policy_name(GlooLoopPolicy p) {
  return p == GlooLoopPolicy::kSchedIdle ? "SCHED_IDLE" : "SCHED_BATCH";
}

World world_join(const RendezvousConfig& rc, GlooLoopPolicy loop) {
  World w;
  if (rc.world_size > 1) {
    w.rendezvous = std::make_unique<Rendezvous>(rc);
    w.collectives = collectives_gloo(*w.rendezvous, rc.timeout, loop);
  } else {
    w.collectives = collectives_local();
  }
  return w;
}

std::unique_ptr<Collectives> collectives_gloo(Rendezvous& rv, milliseconds timeout, GlooLoopPolicy loop) {
  return std::make_unique<GlooCollectives>(rv, timeout, loop);
}

}  // namespace qsync
