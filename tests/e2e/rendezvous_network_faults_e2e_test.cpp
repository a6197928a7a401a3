// File: tests/e2e/rendezvous_network_faults_e2e_test.cpp
// Network faults on the rendezvous connection of two real qsync-worker ranks: rank 1 reaches
// rank 0's store through a TCP proxy (tests/support/tcp_proxy.h; MASTER_PORT is the proxy's port
// for rank 1 only, so the Gloo connections between the ranks go direct). Every chunk delayed
// 200 ms: the job succeeds. The connection reset inside Gloo's address exchange: rank 1
// reconnects and the job succeeds. The idle connection reset while training: the job succeeds.
// The connection reset inside rank 1's join counter (the one request that is not repeated): both
// ranks fail within the 5 s rendezvous timeout, rank 1 naming the store, the request and the
// cause, rank 0 naming rank 1, and neither is left running.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/process.h"
#include "tests/support/tcp_proxy.h"

#ifndef QSYNC_WORKER_BIN
#error "QSYNC_WORKER_BIN must name the qsync-worker binary"
#endif

namespace qsync {
namespace {

using namespace std::chrono_literals;
using test::CutStyle;
using test::Process;
using test::TcpProxy;
using test::TempDir;

// Bytes rank 1's join itself sends and reads through the proxy (kv_protocol.h: greeting 8 + 8,
// join counter's add 32 + 9, its WORLD_SIZE 27 + 1, rank 0's 30 + 6, the verdict 31 + 7; what
// rendezvous_network_faults_test measures), and where the join counter's add request starts.
constexpr int64_t kJoinBytes = 159;
constexpr int64_t kAddRequestStart = 16;

struct Ranks {
  std::vector<Process> procs;
  std::vector<std::string> summaries;
};

// Rank 0 of a 2-rank zoo-MLP job on a free port, rank 1 pointed at `proxy` in front of it.
Ranks start_ranks(const TempDir& dir, int store_port, const TcpProxy& proxy, int64_t steps, int timeout_s) {
  Ranks out;
  for (int r = 0; r < 2; ++r) {
    const std::string base = dir.file("rank" + std::to_string(r));
    test::SpawnOptions o;
    o.args = {QSYNC_WORKER_BIN, "train", "--model", "mlp", "--steps", std::to_string(steps), "--batch", "64",
              "--eval-limit", "50", "--threads", "1", "--seed", "3", "--log-json", "--log-every", "1",
              "--collective-timeout", std::to_string(timeout_s), "--summary-json", base + ".json"};
    o.env = test::rank_env(r, 2, r == 0 ? store_port : proxy.port());
    o.stdout_path = base + ".out";
    o.stderr_path = base + ".err";
    out.summaries.push_back(base + ".json");
    out.procs.emplace_back(o);
  }
  return out;
}

// Both ranks' exit codes (-1: still running after `limit`, then killed by ~Process).
std::vector<int> finish(Ranks& ranks, std::chrono::seconds limit) {
  std::vector<int> codes;
  for (Process& p : ranks.procs) codes.push_back(p.wait_for(limit).value_or(-1));
  return codes;
}

int64_t summary_steps(const std::string& path) {
  const nlohmann::json s = nlohmann::json::parse(test::read_text(path), nullptr, false);
  return s.is_object() ? s.value("steps", int64_t(-1)) : -1;
}

void expect_job_succeeded(Ranks& ranks, int64_t steps) {
  const std::vector<int> codes = finish(ranks, 60s);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], 0) << "rank " << r << ":\n" << ranks.procs[r].err();
    EXPECT_EQ(summary_steps(ranks.summaries[r]), steps) << "rank " << r;
  }
}

TEST(RendezvousNetworkFaultsE2E, DelayedStoreConnectionStillTrains) {
  TempDir dir;
  const int store_port = test::free_tcp_port();
  TcpProxy proxy(store_port);
  proxy.set_delay(200ms);
  const auto t0 = std::chrono::steady_clock::now();
  Ranks ranks = start_ranks(dir, store_port, proxy, 10, 20);
  expect_job_succeeded(ranks, 10);
  std::printf("delayed job: %.1f s, %lld bytes through the proxy\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              static_cast<long long>(proxy.bytes_forwarded()));
  EXPECT_GT(proxy.bytes_forwarded(), kJoinBytes) << "the join and Gloo's exchange went through the proxy";
  EXPECT_EQ(proxy.connections_accepted(), 1);
}

// The cut lands past the join, inside Gloo's exchange of addresses over the store (sets and gets:
// repeated after a reconnect).
TEST(RendezvousNetworkFaultsE2E, ConnectionResetDuringGlooExchangeReconnects) {
  TempDir dir;
  const int store_port = test::free_tcp_port();
  TcpProxy proxy(store_port);
  proxy.cut_after_bytes(kJoinBytes + 40, CutStyle::kReset);
  Ranks ranks = start_ranks(dir, store_port, proxy, 10, 20);
  expect_job_succeeded(ranks, 10);
  EXPECT_EQ(proxy.connections_cut(), 1) << "the store traffic ended before the cut";
  EXPECT_EQ(proxy.connections_accepted(), 2) << "rank 1 reconnected once";
}

// An idle store connection reset after the first step (a NAT or load balancer dropping it): the
// ranks no longer need the store, and rank 0 does not wait for the dead connection at exit.
TEST(RendezvousNetworkFaultsE2E, IdleStoreConnectionResetWhileTraining) {
  TempDir dir;
  const int store_port = test::free_tcp_port();
  TcpProxy proxy(store_port);
  Ranks ranks = start_ranks(dir, store_port, proxy, 30, 20);
  const std::string rank1_out = ranks.procs[1].options().stdout_path;
  ASSERT_TRUE(test::poll_until([&] { return test::last_logged_step(rank1_out) >= 1 || !ranks.procs[1].running(); }, 60s));
  EXPECT_EQ(proxy.cut_open_connections(CutStyle::kReset), 1);
  const auto t0 = std::chrono::steady_clock::now();
  expect_job_succeeded(ranks, 30);
  // The rest of the job takes about 1 s; a rank 0 that waited for the dead connection at exit
  // would take its 20 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
}

// A reset inside the join counter's add: the one request the client will not repeat (it may have
// been applied). Rank 1 fails at once naming the store, the request and that it is not retried;
// rank 0 names rank 1 at its 5 s rendezvous timeout; nothing is left running.
TEST(RendezvousNetworkFaultsE2E, ConnectionResetInTheJoinCounterFailsBothRanksClearly) {
  TempDir dir;
  const int store_port = test::free_tcp_port();
  TcpProxy proxy(store_port);
  proxy.cut_after_bytes(kAddRequestStart + 10, CutStyle::kReset);
  const auto t0 = std::chrono::steady_clock::now();
  Ranks ranks = start_ranks(dir, store_port, proxy, 10, 5);
  const std::vector<int> codes = finish(ranks, 50s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(codes, (std::vector<int>{1, 1})) << ranks.procs[0].err() << ranks.procs[1].err();
  const std::string rank1 = ranks.procs[1].err(), rank0 = ranks.procs[0].err();
  EXPECT_NE(rank1.find("lost the connection to the rendezvous master 127.0.0.1:" + std::to_string(proxy.port()) +
                       " (rank 1 of 2) while adding to key 'rendezvous/joined/1'"),
            std::string::npos) << rank1;
  EXPECT_NE(rank1.find("so it is not retried"), std::string::npos) << rank1;
  EXPECT_NE(rank0.find("rank 1 of 2 did not join within 5 s"), std::string::npos) << rank0;
  EXPECT_EQ(proxy.connections_cut(), 1);
  for (Process& p : ranks.procs) EXPECT_FALSE(p.running()) << "pid " << p.pid() << " outlived the job";
  std::printf("failed in %.1f s\nrank 1: %srank 0: %s", took, rank1.c_str(), rank0.c_str());
}

}  // namespace
}  // namespace qsync
