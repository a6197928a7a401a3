// File: worker/dist/rendezvous.cpp
// Rendezvous configuration from the environment and the join protocol over the key-value store:
//   every rank    add "rendezvous/joined/<r>" (a second process with the same RANK is refused),
//                 set "rendezvous/rank/<r>" = its WORLD_SIZE, checks rank 0's WORLD_SIZE;
//   rank 0        waits for every rank's key, checks their WORLD_SIZE, and publishes
//                 "rendezvous/verdict" = "ok" or the error (who did not join, who disagrees);
//   other ranks   wait for the verdict; without one they name the missing ranks themselves.
#include "worker/dist/rendezvous.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>

#include "worker/dist/kv_store.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;

const std::string kVerdictKey = "rendezvous/verdict";

std::string rank_key(int rank) { return "rendezvous/rank/" + std::to_string(rank); }

bool parse_int(const std::string& text, long long* value) {
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, *value);
  return !text.empty() && r.ec == std::errc() && r.ptr == end;
}

// Reads an integer variable; false when it is not set.
bool int_from_env(const char* name, const char* meaning, long long* value) {
  const char* text = std::getenv(name);
  if (text == nullptr) return false;
  if (!parse_int(text, value)) {
    throw std::invalid_argument(std::string(name) + "=" + text + " is not an integer: set it to " +
                                meaning);
  }
  return true;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  const size_t shown = std::min<size_t>(ranks.size(), 8);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) out += " (and " + std::to_string(ranks.size() - shown) + " more)";
  return out;
}

std::string missing_ranks_message(const std::vector<std::string>& missing_keys,
                                  const RendezvousConfig& c) {
  std::vector<int> ranks;
  for (const std::string& key : missing_keys) {
    long long r = 0;
    if (parse_int(key.substr(rank_key(0).size() - 1), &r)) ranks.push_back(static_cast<int>(r));
  }
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks) + " of " +
         std::to_string(c.world_size) + " did not join within " + format_duration(c.timeout) +
         ": check that " + (ranks.size() == 1 ? "it was" : "they were") +
         " started with MASTER_ADDR=" + c.master_addr + " MASTER_PORT=" +
         std::to_string(c.master_port) + ", and look at " + (ranks.size() == 1 ? "its" : "their") +
         " log";
}

std::string mismatch_message(int rank, long long size, int rank0_size) {
  return "rank " + std::to_string(rank) + " was started with WORLD_SIZE=" + std::to_string(size) +
         " but rank 0 with WORLD_SIZE=" + std::to_string(rank0_size) +
         ": start every rank with the same WORLD_SIZE";
}

long long world_size_value(const std::vector<char>& value) {
  long long size = -1;
  if (!parse_int(std::string(value.begin(), value.end()), &size)) return -1;
  return size;
}

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

}  // namespace

RendezvousConfig rendezvous_config_from_env() {
  RendezvousConfig c;
  if (const char* addr = std::getenv("MASTER_ADDR")) {
    if (*addr == '\0') {
      throw std::invalid_argument("MASTER_ADDR is empty: set it to rank 0's host name or IP address");
    }
    c.master_addr = addr;
  }
  long long v = 0;
  if (int_from_env("MASTER_PORT", "the TCP port rank 0 listens on (1..65535)", &v)) {
    if (v < 1 || v > 65535) {
      throw std::invalid_argument("MASTER_PORT=" + std::to_string(v) +
                                  " is out of range: use a TCP port in 1..65535");
    }
    c.master_port = static_cast<int>(v);
  }
  if (int_from_env("WORLD_SIZE", "the number of ranks in the job", &v)) {
    if (v < 1 || v > 1'000'000) {
      throw std::invalid_argument("WORLD_SIZE=" + std::to_string(v) +
                                  " is out of range: set it to the number of ranks (at least 1)");
    }
    c.world_size = static_cast<int>(v);
  }
  if (int_from_env("RANK", "this process's rank, 0..WORLD_SIZE-1", &v)) {
    if (v < 0 || v >= c.world_size) {
      throw std::invalid_argument("RANK=" + std::to_string(v) + " is not in 0.." +
                                  std::to_string(c.world_size - 1) + " (WORLD_SIZE=" +
                                  std::to_string(c.world_size) +
                                  "): ranks are numbered from 0 to WORLD_SIZE-1");
    }
    c.rank = static_cast<int>(v);
  }
  return c;
}

struct Rendezvous::Impl {
  std::unique_ptr<KeyValueServer> server;  // rank 0 only
  std::unique_ptr<KeyValueClient> client;
  std::mutex scope_mutex;
  std::map<std::string, int> scope_counts;

  void join_as_rank0(const RendezvousConfig& c);
  void join_as_peer(const RendezvousConfig& c);
};

void Rendezvous::Impl::join_as_rank0(const RendezvousConfig& c) {
  std::vector<std::string> keys;
  for (int r = 0; r < c.world_size; ++r) keys.push_back(rank_key(r));
  std::string verdict;
  try {
    client->wait(keys, c.timeout);
  } catch (const StoreWaitError& e) {
    verdict = missing_ranks_message(e.missing(), c);
  }
  for (int r = 1; r < c.world_size && verdict.empty(); ++r) {
    const long long size = world_size_value(client->get(rank_key(r)));
    if (size != c.world_size) verdict = mismatch_message(r, size, c.world_size);
  }
  client->set(kVerdictKey, bytes(verdict.empty() ? "ok" : verdict));
  if (!verdict.empty()) {
    // The store stops when this rank unwinds: first let the waiting ranks read the verdict (each
    // closes its connection once it has it; this rank's own client keeps one open).
    server->wait_for_connections_at_most(1, std::min<milliseconds>(c.timeout, milliseconds(2000)));
    throw std::runtime_error(verdict);
  }
}

void Rendezvous::Impl::join_as_peer(const RendezvousConfig& c) {
  const long long rank0_size = world_size_value(client->get(rank_key(0), c.timeout));
  if (rank0_size != c.world_size) {
    throw std::runtime_error(mismatch_message(c.rank, c.world_size, static_cast<int>(rank0_size)) +
                             " (this rank is refused)");
  }
  std::vector<char> verdict;
  try {
    verdict = client->get(kVerdictKey, c.timeout);
  } catch (const StoreWaitError& e) {
    if (e.server_stopped()) {
      throw std::runtime_error("rank 0 stopped the rendezvous before it completed (rank " +
                               std::to_string(c.rank) + " of " + std::to_string(c.world_size) +
                               " was waiting): see rank 0's log");
    }
    std::vector<std::string> keys;
    for (int r = 0; r < c.world_size; ++r) keys.push_back(rank_key(r));
    try {
      client->wait(keys, milliseconds(0));
    } catch (const StoreWaitError& missing) {
      throw std::runtime_error(missing_ranks_message(missing.missing(), c));
    }
    throw std::runtime_error("every rank joined but rank 0 did not confirm the rendezvous within " +
                             format_duration(c.timeout) + ": see rank 0's log");
  }
  const std::string text(verdict.begin(), verdict.end());
  if (text != "ok") throw std::runtime_error("rank 0 refused the rendezvous: " + text);
}

RendezvousConfig rendezvous_config_with_overrides(int rank, int world_size, const std::string& master_addr,
                                                  int master_port, double timeout_seconds) {
  RendezvousConfig r = rendezvous_config_from_env();
  if (rank >= 0) r.rank = rank;
  if (world_size >= 0) r.world_size = world_size;
  if (master_port >= 0) r.master_port = master_port;
  if (!master_addr.empty()) r.master_addr = master_addr;
  r.timeout = milliseconds(int64_t(timeout_seconds * 1000));
  if (r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size)
    throw std::invalid_argument("rank " + std::to_string(r.rank) + " is outside a world of " +
                                std::to_string(r.world_size) + ": set RANK in [0, WORLD_SIZE)");
  return r;
}

Rendezvous::Rendezvous(const RendezvousConfig& config)
    : config_(config), impl_(std::make_unique<Impl>()) {
  const RendezvousConfig& c = config_;
  if (c.world_size < 1) {
    throw std::invalid_argument("world size " + std::to_string(c.world_size) +
                                " must be at least 1: set WORLD_SIZE");
  }
  if (c.rank < 0 || c.rank >= c.world_size) {
    throw std::invalid_argument("rank " + std::to_string(c.rank) + " is not in 0.." +
                                std::to_string(c.world_size - 1) + ": set RANK below WORLD_SIZE");
  }
  if (c.master_port < 0 || c.master_port > 65535) {
    throw std::invalid_argument("master port " + std::to_string(c.master_port) +
                                " is out of range: use a MASTER_PORT in 1..65535");
  }
  if (c.timeout.count() <= 0) {
    throw std::invalid_argument("the rendezvous timeout must be positive");
  }
  const std::string who = "rank " + std::to_string(c.rank) + " of " + std::to_string(c.world_size);
  std::string connect_host = c.master_addr;
  if (c.rank == 0) {
    // A loopback MASTER_ADDR keeps the store on loopback; otherwise MASTER_ADDR names this host
    // (possibly through a Service or DNS) and the store listens on every interface.
    const std::string bind_host = is_loopback(c.master_addr) ? c.master_addr : "0.0.0.0";
    impl_->server = std::make_unique<KeyValueServer>(bind_host, c.master_port);
    if (!is_loopback(c.master_addr)) connect_host = "127.0.0.1";
  }
  impl_->client = std::make_unique<KeyValueClient>(connect_host, c.master_port, c.timeout, who);
  KeyValueClient& store = *impl_->client;
  if (store.add("rendezvous/joined/" + std::to_string(c.rank), 1) > 1) {
    throw std::runtime_error("rank " + std::to_string(c.rank) +
                             " joined twice: two processes were started with RANK=" +
                             std::to_string(c.rank) + "; give every process its own RANK");
  }
  store.set(rank_key(c.rank), bytes(std::to_string(c.world_size)));
  if (c.rank == 0) {
    impl_->join_as_rank0(c);
  } else {
    impl_->join_as_peer(c);
  }
}

Rendezvous::~Rendezvous() {
  impl_->client.reset();
  if (impl_->server) {
    // Let the other ranks finish with the store and close first (bounded by the timeout); when
    // this rank is unwinding from an error, stop at once so the others fail fast.
    if (std::uncaught_exceptions() == 0) {
      impl_->server->wait_for_connections_at_most(0, config_.timeout);
    }
    impl_->server->stop();
  }
}

KeyValueStore& Rendezvous::store() { return *impl_->client; }

std::string Rendezvous::scope(const std::string& name) {
  std::lock_guard<std::mutex> lock(impl_->scope_mutex);
  const int n = impl_->scope_counts[name]++;
  return name + "/" + std::to_string(n) + "/";
}

}  // namespace qsync
