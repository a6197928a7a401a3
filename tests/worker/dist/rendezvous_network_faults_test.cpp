// File: tests/worker/dist/rendezvous_network_faults_test.cpp
// Network faults on the rendezvous TCP connection, injected by a proxy (tests/support/tcp_proxy.h)
// between rank 1 and rank 0's store, every rank a thread of this process: every chunk delayed
// 200 ms (the job still joins); the connection cut (FIN or RST) while rank 1 waits for the
// verdict (it reconnects and joins); a cut at every byte offset of rank 1's join (each ends in a
// join, or in a prompt error naming the store, the request and the cause); connections turned
// away while the store is "not ready" (retried); a store gone for good and a connection that keeps
// dropping (clear errors within the bounds the client promises).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/tcp_proxy.h"
#include "tests/worker/dist/dist_test_support.h"
#include "worker/dist/kv_protocol.h"
#include "worker/dist/kv_store.h"
#include "worker/dist/rendezvous.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;
using test::CutStyle;
using test::Stopwatch;
using test::TcpProxy;

struct Joined {
  std::string outcome;  // "ok", the error, or "" for a rank never started
  double seconds = 0;   // how long the join (or its failure) took
  int reconnections = 0;
};

// What the ranks ended in and what the proxy saw, read once every rank has finished.
struct WorldRun {
  std::vector<Joined> ranks;
  std::string proxy_address;  // "127.0.0.1:<port>"
  int64_t bytes_forwarded = 0;
  int accepted = 0, cut = 0, turned_away = 0;
};

constexpr milliseconds kNeverStarted{-1};    // in run_world's start_after: the rank is not started
constexpr milliseconds kAfterFaults{-2};      // started once `during` has returned

// The framing of kv_protocol.h: a u32 length and the bytes.
int64_t framed(const std::string& text) { return 4 + int64_t(text.size()); }

// Rank 1's join in a world of up to 9, in bytes through the proxy: the greeting (kMagic each way),
// then the join counter's add (request, answer).
const int64_t kGreetingBytes = 2 * int64_t(sizeof kv::kMagic);
const int64_t kAddEnd = kGreetingBytes + (1 + framed("rendezvous/joined/1") + 8) + (1 + 8);
// Then its WORLD_SIZE's set, the get of rank 0's, and the get of the verdict (the one that waits
// for every rank), up to the end of that request.
const int64_t kVerdictRequestEnd = kAddEnd + (1 + framed("rendezvous/rank/1") + framed("3")) + 1 +
                                   (1 + framed("rendezvous/rank/0") + 8) + (1 + framed("3")) +
                                   (1 + framed("rendezvous/verdict") + 8);

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool wait_for(const std::function<bool()>& condition, milliseconds timeout) {
  Stopwatch clock;
  while (!condition()) {
    if (clock.seconds() * 1000 > double(timeout.count())) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// A world of ranks on threads: rank 0 serves the store on a free port, the other ranks reach it
// through a proxy in front of it. `before(proxy)` runs once the proxy exists (to arm faults),
// `during(proxy)` while the ranks run; rank r starts after start_after[r] (kNeverStarted: not at
// all). Every rank keeps its Rendezvous until all started ones have finished joining. Retries on
// new ports when the store's port was taken meanwhile.
WorldRun run_world(int world, milliseconds timeout, const std::function<void(TcpProxy&)>& before,
                   const std::function<void(TcpProxy&)>& during = {}, std::vector<milliseconds> start_after = {}) {
  start_after.resize(static_cast<size_t>(world), milliseconds(0));
  const int started = world - int(std::count(start_after.begin(), start_after.end(), kNeverStarted));
  WorldRun run;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int store_port = test::free_port();
    TcpProxy proxy(store_port);
    run.proxy_address = "127.0.0.1:" + std::to_string(proxy.port());
    if (before) before(proxy);
    run.ranks.assign(static_cast<size_t>(world), Joined{});
    std::atomic<int> finished{0};
    std::atomic<bool> faults_done{false};
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      if (start_after[size_t(r)] == kNeverStarted) continue;
      threads.emplace_back([&, r] {
        if (start_after[size_t(r)] == kAfterFaults) {
          while (!faults_done) std::this_thread::sleep_for(milliseconds(5));
        } else {
          std::this_thread::sleep_for(start_after[size_t(r)]);
        }
        RendezvousConfig c;
        c.master_port = r == 0 ? store_port : proxy.port();
        c.rank = r;
        c.world_size = world;
        c.timeout = timeout;
        Joined& out = run.ranks[size_t(r)];
        Stopwatch clock;
        std::optional<Rendezvous> rv;
        try {
          rv.emplace(c);
          out.outcome = "ok";
          out.reconnections = dynamic_cast<KeyValueClient&>(rv->store()).reconnections();
        } catch (const std::exception& e) {
          out.outcome = e.what();
        }
        out.seconds = clock.seconds();
        ++finished;
        while (finished < started) std::this_thread::sleep_for(milliseconds(5));
      });
    }
    if (during) during(proxy);
    faults_done = true;
    for (std::thread& t : threads) t.join();
    // Every connection closed (both sides) once the ranks are done.
    wait_for([&] { return proxy.connections_open() == 0; }, milliseconds(5000));
    run.bytes_forwarded = proxy.bytes_forwarded();
    run.accepted = proxy.connections_accepted();
    run.cut = proxy.connections_cut();
    run.turned_away = proxy.connections_turned_away();
    if (!contains(run.ranks[0].outcome, "is in use")) break;
  }
  return run;
}

// Waits until rank 1's get of the verdict has gone through the proxy (with a rank not started yet,
// the store holds it until that rank joins or the timeout passes).
void wait_until_rank1_waits_for_the_verdict(const TcpProxy& proxy) {
  ASSERT_TRUE(wait_for([&] { return proxy.bytes_forwarded() >= kVerdictRequestEnd; }, milliseconds(20000)))
      << proxy.bytes_forwarded() << " bytes forwarded";
  ASSERT_EQ(proxy.bytes_forwarded(), kVerdictRequestEnd) << "the join's traffic is not what this test expects";
  std::this_thread::sleep_for(milliseconds(50));  // let the store read it
}

TEST(RendezvousNetworkFaults, DelayedConnectionStillJoins) {
  const WorldRun run = run_world(2, milliseconds(20000), [](TcpProxy& p) { p.set_delay(milliseconds(200)); });
  ASSERT_EQ(run.ranks[0].outcome, "ok");
  ASSERT_EQ(run.ranks[1].outcome, "ok");
  EXPECT_EQ(run.accepted, 1);
  EXPECT_GE(run.bytes_forwarded, 100);
  // The greeting and four requests, a chunk each way: at least 10 delays of 200 ms.
  EXPECT_GE(run.ranks[1].seconds, 1.9) << "the proxy did not delay the connection";
  EXPECT_EQ(run.ranks[1].reconnections, 0);
}

// World of 3: rank 2 starts once the proxy has cut rank 1's connection while rank 1 sits in its
// get of the verdict; rank 1 reconnects, asks again, and the job joins.
void expect_cut_while_waiting_rejoins(CutStyle style) {
  int cut = -1;
  const WorldRun run = run_world(3, milliseconds(20000), {}, [&](TcpProxy& p) {
    wait_until_rank1_waits_for_the_verdict(p);
    cut = p.cut_open_connections(style);
  }, {milliseconds(0), milliseconds(0), kAfterFaults});
  EXPECT_EQ(cut, 1) << "rank 1's connection (rank 2 had not started)";
  for (int r = 0; r < 3; ++r) EXPECT_EQ(run.ranks[size_t(r)].outcome, "ok") << "rank " << r;
  EXPECT_EQ(run.ranks[1].reconnections, 1);
  EXPECT_EQ(run.accepted, 3) << "rank 1 twice, rank 2 once";
}

TEST(RendezvousNetworkFaults, ConnectionClosedWhileWaitingReconnectsAndJoins) {
  expect_cut_while_waiting_rejoins(CutStyle::kClose);
}

TEST(RendezvousNetworkFaults, ConnectionResetWhileWaitingReconnectsAndJoins) {
  expect_cut_while_waiting_rejoins(CutStyle::kReset);
}

// Cut (RST) after every byte offset of rank 1's join in turn. The greeting is retried and every
// idempotent request repeated, so only a cut between sending the join counter's add and reading
// its answer fails: rank 1 then names the store, the add and that it is not retried, and rank 0
// names rank 1 as missing at its 1 s timeout.
TEST(RendezvousNetworkFaults, CutAtAnyByteOfTheJoinEndsInAJoinOrAClearError) {
  const WorldRun whole = run_world(2, milliseconds(5000), {});
  ASSERT_EQ(whole.ranks[1].outcome, "ok");
  const int64_t greeting = kGreetingBytes, add_end = kAddEnd;
  ASSERT_EQ(whole.bytes_forwarded, kVerdictRequestEnd + 1 + framed("ok")) << "the join's traffic is not what this test expects";
  int joined = 0, failed = 0;
  for (int64_t at = 0; at < whole.bytes_forwarded; ++at) {
    const bool in_add = at >= greeting && at < add_end;
    if (in_add && at % 8 != 0) continue;  // a few offsets inside the add: each costs the 1 s timeout
    const WorldRun run = run_world(2, milliseconds(1000), [&](TcpProxy& p) { p.cut_after_bytes(at, CutStyle::kReset); });
    EXPECT_EQ(run.cut, 1) << "cut after byte " << at;
    for (const Joined& j : run.ranks) EXPECT_LT(j.seconds, 10.0) << "cut after byte " << at << ": " << j.outcome;
    if (!in_add) {
      joined += run.ranks[1].outcome == "ok";
      EXPECT_EQ(run.ranks[1].outcome, "ok") << "cut after byte " << at;
      EXPECT_EQ(run.ranks[0].outcome, "ok") << "cut after byte " << at;
      EXPECT_EQ(run.ranks[1].reconnections, at < greeting ? 0 : 1) << "cut after byte " << at;
      continue;
    }
    ++failed;
    const std::string& said = run.ranks[1].outcome;
    EXPECT_TRUE(contains(said, "lost the connection to the rendezvous master " + run.proxy_address +
                                   " (rank 1 of 2) while adding to key 'rendezvous/joined/1'")) << at << ": " << said;
    EXPECT_TRUE(contains(said, "so it is not retried")) << said;
    EXPECT_TRUE(contains(run.ranks[0].outcome, "rank 1 of 2 did not join within 1 s")) << run.ranks[0].outcome;
  }
  std::printf("cut at %lld offsets: %d joined, %d failed cleanly\n", static_cast<long long>(whole.bytes_forwarded),
              joined, failed);
}

TEST(RendezvousNetworkFaults, ConnectionsTurnedAwayAtFirstAreRetried) {
  const WorldRun run = run_world(2, milliseconds(20000), [](TcpProxy& p) { p.turn_away_for(milliseconds(1000)); });
  EXPECT_EQ(run.ranks[0].outcome, "ok");
  EXPECT_EQ(run.ranks[1].outcome, "ok");
  EXPECT_GE(run.turned_away, 1);
  EXPECT_EQ(run.accepted, 1);
  EXPECT_GE(run.ranks[1].seconds, 0.9) << "joined while the proxy still turned connections away";
}

// Rank 1's connection is cut while it waits for the verdict (rank 2 never starts) and the store
// stays unreachable (every new connection turned away): rank 1 fails once its 2 s reconnect
// window has passed, naming the store, the request, both causes and what to check.
TEST(RendezvousNetworkFaults, StoreUnreachableAfterACutFailsNamingItWithinTheTimeout) {
  Stopwatch clock;
  double cut_at = 0;
  const WorldRun run = run_world(3, milliseconds(2000), {}, [&](TcpProxy& p) {
    wait_until_rank1_waits_for_the_verdict(p);
    p.turn_away_for(milliseconds(60000));
    p.cut_open_connections(CutStyle::kReset);
    cut_at = clock.seconds();
  }, {milliseconds(0), milliseconds(0), kNeverStarted});
  const std::string& said = run.ranks[1].outcome;
  EXPECT_TRUE(contains(said, "lost the connection to the rendezvous master " + run.proxy_address +
                             " (rank 1 of 3) while getting key 'rendezvous/verdict' (Connection reset by peer) "
                             "and could not reconnect within 2 s (last error: connected, but the connection "
                             "was closed before the store answered)")) << said;
  EXPECT_TRUE(contains(said, "see rank 0's log")) << said;
  EXPECT_TRUE(contains(run.ranks[0].outcome, "rank 2 of 3 did not join within 2 s")) << run.ranks[0].outcome;
  EXPECT_GE(run.turned_away, 1);
  EXPECT_LT(run.ranks[1].seconds - cut_at, 20.0) << "rank 1 outlived its 2 s reconnect window by far";
}

// The proxy cuts every open connection every 100 ms while rank 1 waits (rank 2 never starts):
// the call gives up after 3 reconnections instead of looping until its timeout.
TEST(RendezvousNetworkFaults, ConnectionThatKeepsDroppingFailsAfterThreeReconnections) {
  const WorldRun run = run_world(3, milliseconds(3000), {}, [&](TcpProxy& p) {
    wait_until_rank1_waits_for_the_verdict(p);
    Stopwatch clock;
    while (clock.seconds() < 2.5) {
      p.cut_open_connections(CutStyle::kClose);
      std::this_thread::sleep_for(milliseconds(100));
    }
  }, {milliseconds(0), milliseconds(0), kNeverStarted});
  const std::string& said = run.ranks[1].outcome;
  EXPECT_TRUE(contains(said, "while getting key 'rendezvous/verdict' (the other end closed it) again after 3 "
                             "reconnections in one call: the network to rank 0 keeps dropping connections")) << said;
  EXPECT_GE(run.cut, 4);
}

}  // namespace
}  // namespace qsync
