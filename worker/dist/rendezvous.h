// File: worker/dist/rendezvous.h
// Rendezvous the way PyTorch jobs are wired on Kubernetes: MASTER_ADDR, MASTER_PORT, RANK and
// WORLD_SIZE (flags override the environment). Rank 0 serves a small TCP key-value store; every
// rank (rank 0 included) connects to it to exchange connection data for the collectives. Every
// wait has a timeout and names who is missing ("rank 2 of 4 did not join within 60 s").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qsync {

struct RendezvousConfig {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{60000};
};

// Fills a config from MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE (missing variables keep the
// defaults: a single-rank job). Invalid values throw std::invalid_argument naming the variable.
RendezvousConfig rendezvous_config_from_env();
// The environment's config with a command line's overrides applied (rank, world_size and
// master_port when >= 0, master_addr when not empty); timeout_seconds bounds every wait. Throws
// std::invalid_argument when the rank is outside the world.
RendezvousConfig rendezvous_config_with_overrides(int rank, int world_size, const std::string& master_addr,
                                                  int master_port, double timeout_seconds);

// A key-value store client. Keys are strings, values bytes. get() waits until the key exists
// (or the timeout passes: std::runtime_error naming the key and who should have set it).
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  // Waits for all keys; the error names the first missing ones.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;  // atomic counter, returns new value
};

// Rank 0 starts the server on master_port (error when the port is in use: "port 29500 on
// 127.0.0.1 is in use: pick another MASTER_PORT"); every rank connects (error when the master
// cannot be reached within the timeout; a connection lost later is reconnected, see
// KeyValueClient). Then all ranks check in; a rank that does not join within
// the timeout is named, and a rank that reports another world size is refused.
class Rendezvous {
 public:
  explicit Rendezvous(const RendezvousConfig& config);
  ~Rendezvous();
  const RendezvousConfig& config() const { return config_; }
  KeyValueStore& store();
  // A fresh key prefix for one user of the store (e.g. one collectives instance): "<name>/<n>/",
  // n counting this rank's calls with that name. Every rank makes the same calls in the same order.
  std::string scope(const std::string& name);

 private:
  RendezvousConfig config_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qsync
