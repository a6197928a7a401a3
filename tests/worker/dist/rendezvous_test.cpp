// File: tests/worker/dist/rendezvous_test.cpp
// Rendezvous with every rank on its own thread on 127.0.0.1: a full join, a rank with another
// WORLD_SIZE, missing ranks named within the timeout, a duplicated RANK, port in use, an
// unreachable master, and the environment parsing errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <latch>
#include <map>
#include <optional>
#include <thread>

#include "tests/worker/dist/dist_test_support.h"
#include "worker/dist/rendezvous.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;
using test::Stopwatch;

struct RankSpec {
  int rank;
  int world_size;
};

// Runs one thread per spec; each keeps its Rendezvous until every thread has finished joining.
// Returns "ok" or the error text per spec. Retries on a new port if the port was taken meanwhile.
std::vector<std::string> run_ranks(const std::vector<RankSpec>& specs, milliseconds timeout,
                                   const std::function<void(int, Rendezvous&)>& after_join = {}) {
  std::vector<std::string> results;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = test::free_port();
    results.assign(specs.size(), "");
    std::latch joined(static_cast<std::ptrdiff_t>(specs.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < specs.size(); ++i) {
      threads.emplace_back([&, i] {
        RendezvousConfig c;
        c.master_addr = "127.0.0.1";
        c.master_port = port;
        c.rank = specs[i].rank;
        c.world_size = specs[i].world_size;
        c.timeout = timeout;
        std::optional<Rendezvous> rv;
        try {
          if (c.rank != 0) std::this_thread::sleep_for(milliseconds(20));  // rank 0 usually first
          rv.emplace(c);
          if (after_join) after_join(c.rank, *rv);
          results[i] = "ok";
        } catch (const std::exception& e) {
          results[i] = e.what();
        }
        joined.arrive_and_wait();
      });
    }
    for (std::thread& t : threads) t.join();
    bool port_taken = false;
    for (const std::string& r : results) port_taken |= r.find("is in use") != std::string::npos;
    if (!port_taken) break;
  }
  return results;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Rendezvous, FourRanksJoinAndShareTheStore) {
  std::latch values_set(4);
  std::map<int, std::string> seen;
  std::mutex seen_mutex;
  const auto results = run_ranks({{0, 4}, {1, 4}, {2, 4}, {3, 4}}, milliseconds(5000),
                                 [&](int rank, Rendezvous& rv) {
    rv.store().set("hello/" + std::to_string(rank), {char('A' + rank)});
    values_set.arrive_and_wait();
    const std::vector<char> v = rv.store().get("hello/" + std::to_string((rank + 1) % 4));
    std::lock_guard<std::mutex> lock(seen_mutex);
    seen[rank] = std::string(v.begin(), v.end());
  });
  EXPECT_EQ(results, std::vector<std::string>(4, "ok"));
  EXPECT_EQ(seen, (std::map<int, std::string>{{0, "B"}, {1, "C"}, {2, "D"}, {3, "A"}}));
}

TEST(Rendezvous, SingleRankJob) {
  EXPECT_EQ(run_ranks({{0, 1}}, milliseconds(2000)), std::vector<std::string>{"ok"});
}

TEST(Rendezvous, ScopesAreFreshPerCall) {
  run_ranks({{0, 1}}, milliseconds(2000), [](int, Rendezvous& rv) {
    EXPECT_EQ(rv.scope("gloo"), "gloo/0/");
    EXPECT_EQ(rv.scope("gloo"), "gloo/1/");
    EXPECT_EQ(rv.scope("nccl"), "nccl/0/");
  });
}

TEST(Rendezvous, WorldSizeMismatchIsRefusedOnEveryRank) {
  Stopwatch clock;
  const auto results = run_ranks({{0, 3}, {1, 3}, {2, 4}}, milliseconds(5000));
  const std::string reason =
      "rank 2 was started with WORLD_SIZE=4 but rank 0 with WORLD_SIZE=3: start every rank with "
      "the same WORLD_SIZE";
  EXPECT_TRUE(contains(results[2], reason + " (this rank is refused)")) << results[2];
  EXPECT_TRUE(contains(results[0], reason)) << results[0];
  EXPECT_TRUE(contains(results[1], "rank 0 refused the rendezvous: " + reason)) << results[1];
  EXPECT_LT(clock.seconds(), 3.0);  // refused at once, not after the timeout
}

TEST(Rendezvous, MissingRankIsNamedWithinTheTimeout) {
  Stopwatch clock;
  const auto results = run_ranks({{0, 3}, {1, 3}}, milliseconds(1000));
  for (const std::string& r : results) {
    EXPECT_TRUE(contains(r, "rank 2 of 3 did not join within 1 s")) << r;
  }
  EXPECT_TRUE(contains(results[0], "MASTER_ADDR=127.0.0.1")) << results[0];
  EXPECT_GE(clock.seconds(), 0.9);
  EXPECT_LT(clock.seconds(), 4.0);
}

TEST(Rendezvous, SeveralMissingRanksAreAllNamed) {
  const auto results = run_ranks({{0, 4}, {1, 4}}, milliseconds(500));
  for (const std::string& r : results) {
    EXPECT_TRUE(contains(r, "ranks 2, 3 of 4 did not join within 500 ms")) << r;
  }
}

TEST(Rendezvous, DuplicateRankIsRefused) {
  const auto results = run_ranks({{0, 3}, {1, 3}, {1, 3}, {2, 3}}, milliseconds(5000));
  int refused = 0;
  for (const std::string& r : results) {
    if (r == "ok") continue;
    ++refused;
    EXPECT_TRUE(contains(r, "rank 1 joined twice: two processes were started with RANK=1")) << r;
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(results[0], "ok");
  EXPECT_EQ(results[3], "ok");
}

TEST(Rendezvous, PortInUseNamesThePortAndTheFix) {
  test::PortHolder taken;
  RendezvousConfig c;
  c.master_addr = "127.0.0.1";
  c.master_port = taken.port();
  c.world_size = 2;
  try {
    Rendezvous rv(c);
    FAIL() << "rank 0 on a taken port must fail";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "port " + std::to_string(taken.port()) +
                                       " on 127.0.0.1 is in use: pick another MASTER_PORT"))
        << e.what();
  }
}

TEST(Rendezvous, UnreachableMasterTimesOut) {
  RendezvousConfig c;
  c.master_addr = "127.0.0.1";
  c.master_port = test::free_port();
  c.rank = 1;
  c.world_size = 4;
  c.timeout = milliseconds(1000);
  Stopwatch clock;
  try {
    Rendezvous rv(c);
    FAIL() << "a rank whose master never starts must fail";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "could not reach the rendezvous master 127.0.0.1:" +
                                       std::to_string(c.master_port) +
                                       " within 1 s (rank 1 of 4): check MASTER_ADDR/MASTER_PORT "
                                       "and that rank 0 is running"))
        << e.what();
  }
  EXPECT_GE(clock.seconds(), 0.9);
  EXPECT_LT(clock.seconds(), 3.0);
}

TEST(Rendezvous, PortIsFreeAgainAfterTheJob) {
  const int port = test::free_port();
  for (int run = 0; run < 2; ++run) {
    RendezvousConfig c;
    c.master_port = port;
    c.world_size = 1;
    EXPECT_NO_THROW(Rendezvous rv(c)) << "run " << run;
  }
}

// Sets (or unsets, for nullopt) environment variables for one test and restores them.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : vars) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::string env_error(const std::map<std::string, std::optional<std::string>>& vars) {
  ScopedEnv env(vars);
  try {
    rendezvous_config_from_env();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(RendezvousConfigFromEnv, DefaultsAndValues) {
  {
    ScopedEnv env({});
    const RendezvousConfig c = rendezvous_config_from_env();
    EXPECT_EQ(c.master_addr, "127.0.0.1");
    EXPECT_EQ(c.master_port, 29500);
    EXPECT_EQ(c.rank, 0);
    EXPECT_EQ(c.world_size, 1);
  }
  ScopedEnv env({{"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}, {"RANK", "3"},
                 {"WORLD_SIZE", "4"}});
  const RendezvousConfig c = rendezvous_config_from_env();
  EXPECT_EQ(c.master_addr, "job-master-0");
  EXPECT_EQ(c.master_port, 23456);
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
}

TEST(RendezvousConfigFromEnv, ErrorsNameTheVariable) {
  EXPECT_TRUE(contains(env_error({{"RANK", "abc"}, {"WORLD_SIZE", "4"}}),
                       "RANK=abc is not an integer"));
  EXPECT_TRUE(contains(env_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
                       "RANK=4 is not in 0..3 (WORLD_SIZE=4)"));
  EXPECT_TRUE(contains(env_error({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}), "RANK=-1"));
  EXPECT_TRUE(contains(env_error({{"WORLD_SIZE", "0"}}), "WORLD_SIZE=0 is out of range"));
  EXPECT_TRUE(contains(env_error({{"WORLD_SIZE", "2x"}}), "WORLD_SIZE=2x is not an integer"));
  EXPECT_TRUE(contains(env_error({{"MASTER_PORT", "70000"}}),
                       "MASTER_PORT=70000 is out of range: use a TCP port in 1..65535"));
  EXPECT_TRUE(contains(env_error({{"MASTER_PORT", "0"}}), "MASTER_PORT=0 is out of range"));
  EXPECT_TRUE(contains(env_error({{"MASTER_PORT", "http"}}), "MASTER_PORT=http is not an integer"));
  EXPECT_TRUE(contains(env_error({{"MASTER_ADDR", ""}}), "MASTER_ADDR is empty"));
  EXPECT_EQ(env_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), "no error");
}

}  // namespace
}  // namespace qsync
