// File: tests/worker/dist/link_model_test.cpp
// Tests for worker/dist/link_model.h: parsing of --link (good and bad forms, describe() round
// trips), the emulated-seconds formulas, the decorator around a counting fake (forwards every call,
// waits at least the emulated time, a disabled link leaves the collectives unwrapped), and two Gloo
// ranks as forked processes on 127.0.0.1 whose collectives under `10ms,1GB/s` take at least the
// emulated time and still sum correctly. Timing checks are lower bounds only.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/dist/dist_test_support.h"
#include "worker/dist/link_model.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;
using test::Stopwatch;

std::string error_of(const std::string& text) {
  try {
    link_model_parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(LinkModelParse, AcceptedForms) {
  LinkModel a = link_model_parse("50us,10GB/s");
  EXPECT_DOUBLE_EQ(a.latency_seconds, 50e-6);
  EXPECT_DOUBLE_EQ(a.bytes_per_second, 10e9);
  EXPECT_TRUE(a.enabled());

  LinkModel b = link_model_parse("1ms,100MB/s");
  EXPECT_DOUBLE_EQ(b.latency_seconds, 1e-3);
  EXPECT_DOUBLE_EQ(b.bytes_per_second, 100e6);

  LinkModel c = link_model_parse(" 1.5ms , 12.5MiB/s ");
  EXPECT_DOUBLE_EQ(c.latency_seconds, 1.5e-3);
  EXPECT_DOUBLE_EQ(c.bytes_per_second, 12.5 * 1048576.0);

  EXPECT_DOUBLE_EQ(link_model_parse("250ns,1GiB/s").latency_seconds, 250e-9);
  EXPECT_DOUBLE_EQ(link_model_parse("250ns,1GiB/s").bytes_per_second, 1073741824.0);
  EXPECT_DOUBLE_EQ(link_model_parse("2s,3B/s").latency_seconds, 2.0);
  EXPECT_DOUBLE_EQ(link_model_parse("2s,3B/s").bytes_per_second, 3.0);
  EXPECT_DOUBLE_EQ(link_model_parse("1us,4KB/s").bytes_per_second, 4000.0);
  EXPECT_DOUBLE_EQ(link_model_parse("1us,4KiB/s").bytes_per_second, 4096.0);

  LinkModel latency_only = link_model_parse("50us");
  EXPECT_DOUBLE_EQ(latency_only.latency_seconds, 50e-6);
  EXPECT_EQ(latency_only.bytes_per_second, 0.0);
  LinkModel bandwidth_only = link_model_parse("10GB/s");
  EXPECT_EQ(bandwidth_only.latency_seconds, 0.0);
  EXPECT_DOUBLE_EQ(bandwidth_only.bytes_per_second, 10e9);
  EXPECT_TRUE(bandwidth_only.enabled());
  LinkModel zero_latency = link_model_parse("0us,1GB/s");
  EXPECT_EQ(zero_latency.latency_seconds, 0.0);
  EXPECT_TRUE(zero_latency.enabled());

  LinkModel none = link_model_parse("none");
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.describe(), "none");
  EXPECT_FALSE(LinkModel{}.enabled());
}

TEST(LinkModelParse, RejectsBadFormsNamingTheTextAndAnExample) {
  const std::vector<std::string> bad = {"",         "fast",          "50,10GB/s",     "50us,10Gb/s", "50us,10GB",
                                        "-1us,1GB/s", "50us,0GB/s",  "1us,2GB/s,3",   "abcus,1GB/s", "50 us,1GB/s",
                                        "0us",      "1e400us,1GB/s", "50us,",         ",10GB/s",     "inf,1GB/s"};
  for (const std::string& text : bad) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("--link '" + text + "'"), std::string::npos) << "text '" << text << "': " << e;
    EXPECT_NE(e.find("50us,10GB/s"), std::string::npos) << "text '" << text << "': " << e;
  }
  EXPECT_NE(error_of("50us,10Gb/s").find("needs a unit B/s"), std::string::npos) << error_of("50us,10Gb/s");
  EXPECT_NE(error_of("50,1GB/s").find("the latency '50' needs a unit"), std::string::npos) << error_of("50,1GB/s");
  EXPECT_NE(error_of("50us,0GB/s").find("must be positive"), std::string::npos);
}

TEST(LinkModelParse, DescribeRoundTrips) {
  EXPECT_EQ(link_model_parse("50us,10GB/s").describe(), "50us,10GB/s");
  EXPECT_EQ(link_model_parse("1ms,100MB/s").describe(), "1ms,100MB/s");
  EXPECT_EQ(link_model_parse("1500us,2500KB/s").describe(), "1.5ms,2.5MB/s");
  EXPECT_EQ(link_model_parse("2s,3B/s").describe(), "2s,3B/s");
  EXPECT_EQ(link_model_parse("250ns,20KB/s").describe(), "250ns,20KB/s");
  EXPECT_EQ(link_model_parse("50us").describe(), "50us");
  EXPECT_EQ(link_model_parse("0ms,10GB/s").describe(), "10GB/s");
  for (const std::string text : {"50us,10GB/s", "3ms,1GiB/s", "7ns,12.5MiB/s", "50us", "10GB/s"}) {
    const LinkModel a = link_model_parse(text);
    const LinkModel b = link_model_parse(a.describe());
    EXPECT_NEAR(b.latency_seconds, a.latency_seconds, 1e-5 * a.latency_seconds) << text << " -> " << a.describe();
    EXPECT_NEAR(b.bytes_per_second, a.bytes_per_second, 1e-5 * a.bytes_per_second) << text << " -> " << a.describe();
  }
}

TEST(LinkModelSeconds, RingFormulas) {
  const LinkModel link = link_model_parse("50us,10GB/s");
  // all-reduce: 2 (N-1) latency + 2 (N-1)/N n / bandwidth
  EXPECT_NEAR(link_all_reduce_seconds(link, 1000000, 2), 2 * 50e-6 + 1e6 / 1e10, 1e-12);
  EXPECT_NEAR(link_all_reduce_seconds(link, 1000000, 4), 6 * 50e-6 + 1.5e6 / 1e10, 1e-12);
  EXPECT_NEAR(link_all_reduce_seconds(link, 0, 3), 4 * 50e-6, 1e-12);
  // broadcast: (N-1) latency + (N-1)/N n / bandwidth
  EXPECT_NEAR(link_broadcast_seconds(link, 1000000, 2), 50e-6 + 0.5e6 / 1e10, 1e-12);
  EXPECT_NEAR(link_broadcast_seconds(link, 4000000, 4), 3 * 50e-6 + 3e6 / 1e10, 1e-12);
  // One rank moves nothing; no link costs nothing; latency-only has no bandwidth term.
  EXPECT_EQ(link_all_reduce_seconds(link, 1000000, 1), 0.0);
  EXPECT_EQ(link_broadcast_seconds(link, 1000000, 1), 0.0);
  EXPECT_EQ(link_all_reduce_seconds(LinkModel{}, 1000000, 8), 0.0);
  EXPECT_NEAR(link_all_reduce_seconds(link_model_parse("1ms"), 1 << 30, 2), 2e-3, 1e-12);
  EXPECT_NEAR(link_all_reduce_seconds(link_model_parse("1GB/s"), 1000000000, 2), 1.0, 1e-12);
}

// A two-rank stand-in that adds 1 to every reduced value and counts the calls.
class CountingCollectives final : public Collectives {
 public:
  const char* backend() const override { return "counting"; }
  int rank() const override { return 1; }
  int world_size() const override { return 2; }
  void all_reduce_sum(float* data, int64_t count) override {
    ++calls;
    for (int64_t i = 0; i < count; ++i) data[i] += 1.0f;
  }
  void all_reduce_sum(double* data, int64_t count) override {
    ++calls;
    for (int64_t i = 0; i < count; ++i) data[i] += 1.0;
  }
  void broadcast(float*, int64_t, int) override { ++calls; }
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    ++calls;
    for (int64_t i = 0; i < 2 * count; ++i) out[i] = in[i % count];
  }
  void barrier() override { ++calls; }
  int calls = 0;
};

TEST(LinkCollectives, ForwardsAndWaitsAtLeastTheEmulatedTime) {
  auto inner = std::make_unique<CountingCollectives>();
  CountingCollectives* counting = inner.get();
  const LinkModel link = link_model_parse("1ms,1GB/s");
  std::unique_ptr<Collectives> coll = collectives_with_link(std::move(inner), link);
  EXPECT_EQ(std::string(coll->backend()), "counting+link(1ms,1GB/s)");
  EXPECT_EQ(coll->rank(), 1);
  EXPECT_EQ(coll->world_size(), 2);

  std::vector<float> f(1000000, 2.0f);  // 4 MB: 2 ms latency + 4 ms transfer
  Stopwatch clock;
  coll->all_reduce_sum(f.data(), int64_t(f.size()));
  EXPECT_GE(clock.seconds(), link_all_reduce_seconds(link, 4000000, 2));
  EXPECT_EQ(f[0], 3.0f);
  EXPECT_EQ(f.back(), 3.0f);

  double d[2] = {1.0, 2.0};
  clock = Stopwatch();
  coll->all_reduce_sum(d, 2);
  EXPECT_GE(clock.seconds(), 2e-3);
  EXPECT_EQ(d[1], 3.0);

  clock = Stopwatch();
  coll->broadcast(f.data(), int64_t(f.size()), 0);
  EXPECT_GE(clock.seconds(), link_broadcast_seconds(link, 4000000, 2));

  const uint64_t in[2] = {7, 8};
  uint64_t out[4] = {};
  clock = Stopwatch();
  coll->all_gather(in, out, 2);
  EXPECT_GE(clock.seconds(), link_broadcast_seconds(link, 32, 2));
  EXPECT_EQ(out[3], 8u);

  clock = Stopwatch();
  coll->barrier();
  EXPECT_GE(clock.seconds(), 2e-3);
  EXPECT_EQ(counting->calls, 5);
}

TEST(LinkCollectives, HonoursMicrosecondLatencies) {
  std::unique_ptr<Collectives> coll =
      collectives_with_link(std::make_unique<CountingCollectives>(), link_model_parse("50us"));
  float x = 0;
  for (int i = 0; i < 20; ++i) {  // 100 us each: sleep_for alone would often overshoot, never undershoot
    Stopwatch clock;
    coll->all_reduce_sum(&x, 1);
    EXPECT_GE(clock.seconds(), 100e-6) << "call " << i;
  }
  EXPECT_EQ(x, 20.0f);
}

TEST(LinkCollectives, DisabledLinkReturnsTheInnerCollectives) {
  auto inner = std::make_unique<CountingCollectives>();
  Collectives* raw = inner.get();
  std::unique_ptr<Collectives> same = collectives_with_link(std::move(inner), link_model_parse("none"));
  EXPECT_EQ(same.get(), raw);
  EXPECT_STREQ(same->backend(), "counting");
  EXPECT_THROW(collectives_with_link(nullptr, link_model_parse("1ms")), std::invalid_argument);

  std::unique_ptr<Collectives> local = collectives_with_link(collectives_local(), link_model_parse("1s,1B/s"));
  EXPECT_STREQ(local->backend(), "local+link(1s,1B/s)");
  Stopwatch clock;
  float x = 5.0f;
  local->all_reduce_sum(&x, 1);  // one rank: nothing to emulate
  EXPECT_LT(clock.seconds(), 0.5);
  EXPECT_EQ(x, 5.0f);
}

// Forks two ranks that join a rendezvous on 127.0.0.1, connect Gloo, wrap it with `link` and run
// `body`; returns each rank's "" (success) or error message. Retries when the port got taken.
std::vector<std::string> run_two_ranks(const LinkModel& link, const std::function<void(Collectives&)>& body) {
  std::vector<std::string> messages;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = test::free_port();
    std::vector<pid_t> pids;
    std::vector<int> pipes;
    for (int rank = 0; rank < 2; ++rank) {
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("test setup: pipe failed");
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        std::string message;
        try {
          RendezvousConfig c;
          c.master_addr = "127.0.0.1";
          c.master_port = port;
          c.rank = rank;
          c.world_size = 2;
          c.timeout = milliseconds(10000);
          Rendezvous rv(c);
          std::unique_ptr<Collectives> coll =
              collectives_with_link(collectives_gloo(rv, c.timeout, GlooLoopPolicy::kSchedIdle), link);
          body(*coll);
        } catch (const std::exception& e) {
          message = "rank " + std::to_string(rank) + ": " + e.what();
        }
        if (!message.empty() && ::write(fds[1], message.data(), message.size()) < 0) ::_exit(5);
        ::_exit(message.empty() ? 0 : 1);
      }
      ::close(fds[1]);
      pids.push_back(pid);
      pipes.push_back(fds[0]);
    }
    messages.assign(2, "");
    Stopwatch clock;
    for (int rank = 0; rank < 2; ++rank) {
      int status = 0;
      while (::waitpid(pids[size_t(rank)], &status, WNOHANG) == 0) {
        if (clock.seconds() > 25) {
          for (pid_t pid : pids) ::kill(pid, SIGKILL);  // only our own children
        }
        std::this_thread::sleep_for(milliseconds(5));
      }
      char buffer[4096];
      ssize_t n = 0;
      while ((n = ::read(pipes[size_t(rank)], buffer, sizeof buffer)) > 0) messages[size_t(rank)].append(buffer, size_t(n));
      ::close(pipes[size_t(rank)]);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && messages[size_t(rank)].empty()) {
        messages[size_t(rank)] = "rank " + std::to_string(rank) + " exited abnormally (status " + std::to_string(status) + ")";
      }
    }
    bool port_taken = false;
    for (const std::string& m : messages) port_taken |= m.find("is in use") != std::string::npos;
    if (!port_taken) break;
  }
  return messages;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

TEST(LinkCollectives, TwoGlooRanksTakeAtLeastTheEmulatedTimeAndSumCorrectly) {
  const LinkModel link = link_model_parse("10ms,1GB/s");
  const auto messages = run_two_ranks(link, [&](Collectives& coll) {
    check(std::string(coll.backend()) == "gloo+link(10ms,1GB/s)", std::string("backend ") + coll.backend());
    const int rank = coll.rank();
    std::vector<float> f(1000000);  // 4 MB: 2 x 10 ms latency + 4 ms transfer = 24 ms emulated
    for (size_t i = 0; i < f.size(); ++i) f[i] = float(rank + int(i % 1000));
    const double want_seconds = link_all_reduce_seconds(link, int64_t(f.size() * sizeof(float)), 2);
    Stopwatch clock;
    coll.all_reduce_sum(f.data(), int64_t(f.size()));
    const double took = clock.seconds();
    check(took >= want_seconds, "all_reduce took " + std::to_string(took) + " s < emulated " +
                                    std::to_string(want_seconds) + " s");
    for (size_t i = 0; i < f.size(); ++i) {
      check(f[i] == float(2 * int(i % 1000) + 1), "sum at " + std::to_string(i) + ": " + std::to_string(f[i]));
    }
    double d = rank + 0.5;
    coll.all_reduce_sum(&d, 1);
    check(d == 2.0, "double sum " + std::to_string(d));

    std::vector<float> b(1000, rank == 1 ? 3.0f : 0.0f);
    clock = Stopwatch();
    coll.broadcast(b.data(), int64_t(b.size()), 1);
    check(clock.seconds() >= link_broadcast_seconds(link, 4000, 2), "broadcast was faster than emulated");
    check(b[999] == 3.0f, "broadcast value");

    const uint64_t in = uint64_t(rank) + 40;
    uint64_t out[2] = {};
    coll.all_gather(&in, out, 1);
    check(out[0] == 40 && out[1] == 41, "all_gather");
    clock = Stopwatch();
    coll.barrier();
    check(clock.seconds() >= 20e-3, "barrier was faster than 2 x 10 ms");
  });
  for (const std::string& m : messages) EXPECT_EQ(m, "");
}

}  // namespace
}  // namespace qsync
