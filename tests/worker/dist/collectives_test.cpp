// File: tests/worker/dist/collectives_test.cpp
// Gloo collectives with every rank a forked process on 127.0.0.1: sums (exact for small
// integers), broadcast, all_gather and barrier for 2 and 3 ranks; a rank that exits early or hangs
// makes the others throw CollectiveError within the timeout instead of hanging; Gloo's event-loop
// thread runs the policy asked for (SCHED_IDLE or SCHED_BATCH) and the caller's is left alone. Also the
// single-rank stand-in and the NCCL backend's refusal where there is no GPU.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "tests/worker/dist/dist_test_support.h"
#include "tests/worker/dist/forked_ranks.h"
#include "worker/dist/collectives.h"

#if QSYNC_TEST_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace qsync {
namespace {

using std::chrono::milliseconds;
using test::expect;
using test::expect_all_succeeded;
using test::Mismatch;
using test::RankResult;
using test::run_ranks;
using test::Stopwatch;

void exercise_every_collective(int rank, Collectives& coll) {
  const int w = coll.world_size();
  expect(std::string(coll.backend()) == "gloo" && coll.rank() == rank, "identity");

  // Large enough for several of Gloo's segments; values stay exact in float.
  std::vector<float> f(300000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(rank + int(i % 1000));
  coll.all_reduce_sum(f.data(), int64_t(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    const float want = float(w * int(i % 1000) + w * (w - 1) / 2);
    expect(f[i] == want, "float sum at " + std::to_string(i) + ": " + std::to_string(f[i]) +
                             " != " + std::to_string(want));
  }
  std::vector<double> d(1001);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.5 * (rank + 1) * double(i);
  coll.all_reduce_sum(d.data(), int64_t(d.size()));
  for (size_t i = 0; i < d.size(); ++i) {
    expect(d[i] == 0.5 * double(w * (w + 1) / 2) * double(i), "double sum at " + std::to_string(i));
  }

  const int root = w - 1;
  std::vector<float> b(777, 0.0f);
  if (rank == root) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = 7.0f + float(i);
  }
  coll.broadcast(b.data(), int64_t(b.size()), root);
  for (size_t i = 0; i < b.size(); ++i) expect(b[i] == 7.0f + float(i), "broadcast");

  const uint64_t in[3] = {uint64_t(rank) * 10, uint64_t(rank) * 10 + 1, (uint64_t(1) << 60) + rank};
  std::vector<uint64_t> out(3 * w, 0);
  coll.all_gather(in, out.data(), 3);
  for (int r = 0; r < w; ++r) {
    expect(out[3 * r] == uint64_t(r) * 10 && out[3 * r + 1] == uint64_t(r) * 10 + 1 &&
               out[3 * r + 2] == (uint64_t(1) << 60) + r,
           "all_gather slot of rank " + std::to_string(r));
  }

  // Barrier: nobody leaves before the late rank 0 arrives.
  Stopwatch clock;
  if (rank == 0) std::this_thread::sleep_for(milliseconds(200));
  coll.barrier();
  expect(clock.seconds() >= 0.15, "barrier let rank " + std::to_string(rank) + " through early");
  coll.barrier();
  coll.all_reduce_sum(f.data(), 0);  // empty calls are no-ops
}

TEST(GlooCollectives, TwoRanks) {
  expect_all_succeeded(run_ranks(2, milliseconds(10000), [](int rank, Rendezvous&, Collectives& c) {
    exercise_every_collective(rank, c);
  }));
}

TEST(GlooCollectives, ThreeRanks) {
  expect_all_succeeded(run_ranks(3, milliseconds(10000), [](int rank, Rendezvous&, Collectives& c) {
    exercise_every_collective(rank, c);
  }));
}

TEST(GlooCollectives, TwoInstancesOnOneRendezvous) {
  const auto results = run_ranks(2, milliseconds(10000), [](int rank, Rendezvous& rv,
                                                            Collectives& first) {
    auto second = collectives_gloo(rv, milliseconds(10000), GlooLoopPolicy::kSchedBatch);
    double x = rank + 1;
    second->all_reduce_sum(&x, 1);
    expect(x == 3.0, "second instance sum " + std::to_string(x));
    float y = float(rank + 10);
    first.all_reduce_sum(&y, 1);
    expect(y == 21.0f, "first instance sum " + std::to_string(y));
  });
  expect_all_succeeded(results);
}

// Gloo's event-loop thread runs the policy the caller asked for (training: SCHED_IDLE, never
// taking the CPU from the computing thread; inference: SCHED_BATCH, no wake-up preemption), and
// the calling thread keeps its own policy. The threads' policies are read from the kernel.
void expect_loop_thread_policy(GlooLoopPolicy loop, int policy) {
  if (::sched_getscheduler(0) != SCHED_OTHER) GTEST_SKIP() << "the test process does not run SCHED_OTHER";
  bool allowed = false;
  std::thread([&] {
    const sched_param none{};
    allowed = ::sched_setscheduler(0, policy, &none) == 0;
  }).join();
  if (!allowed) GTEST_SKIP() << "this kernel or sandbox refuses " << gloo_loop_policy_name(loop);
  expect_all_succeeded(run_ranks(2, milliseconds(10000), [policy](int rank, Rendezvous&, Collectives& c) {
    int with_policy = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      const pid_t tid = pid_t(std::stol(task.path().filename().string()));
      if (::sched_getscheduler(tid) == policy) ++with_policy;
    }
    expect(with_policy >= 1, "rank " + std::to_string(rank) + ": no thread runs the asked policy (Gloo's event loop)");
    expect(::sched_getscheduler(0) == SCHED_OTHER, "the calling thread left SCHED_OTHER");
    float x = float(rank);
    c.all_reduce_sum(&x, 1);
    expect(x == 1.0f, "sum " + std::to_string(x));
  }, milliseconds(20000), loop));
}

TEST(GlooCollectives, EventLoopThreadRunsIdleForTrainingAndTheCallerKeepsItsPolicy) {
  expect_loop_thread_policy(GlooLoopPolicy::kSchedIdle, SCHED_IDLE);
}

TEST(GlooCollectives, EventLoopThreadRunsBatchForInferenceAndTheCallerKeepsItsPolicy) {
  expect_loop_thread_policy(GlooLoopPolicy::kSchedBatch, SCHED_BATCH);
}

// The others' call must fail within the timeout (asserted: under 10x) and name the operation.
void expect_peer_failure(int rank, Collectives& coll, milliseconds timeout) {
  std::vector<float> data(1024, 1.0f);
  Stopwatch clock;
  try {
    coll.all_reduce_sum(data.data(), int64_t(data.size()));
    throw Mismatch("rank " + std::to_string(rank) + ": all_reduce_sum succeeded without a peer");
  } catch (const CollectiveError& e) {
    const std::string message = e.what();
    expect(message.find("gloo all_reduce_sum failed on rank " + std::to_string(rank)) !=
                   std::string::npos &&
               message.find("a peer rank likely died or is unreachable") != std::string::npos,
           "unexpected message: " + message);
  }
  const double limit = 10.0 * std::chrono::duration<double>(timeout).count();
  expect(clock.seconds() < limit, "failure took " + std::to_string(clock.seconds()) + " s");
  try {
    coll.barrier();
    throw Mismatch("a failed process group must refuse further calls");
  } catch (const CollectiveError& e) {
    expect(std::string(e.what()).find("failed earlier") != std::string::npos, e.what());
  }
}

TEST(GlooCollectives, RankThatExitsEarlyMakesTheOthersThrow) {
  const milliseconds timeout(3000);
  Stopwatch clock;
  const auto results = run_ranks(3, timeout, [&](int rank, Rendezvous&, Collectives& coll) {
    coll.barrier();  // everyone is connected
    if (rank == 2) ::_exit(0);
    expect_peer_failure(rank, coll, timeout);
  });
  expect_all_succeeded(results);
  EXPECT_LT(clock.seconds(), 15.0);
}

TEST(GlooCollectives, RankThatHangsMakesTheOthersTimeOut) {
  const milliseconds timeout(1000);
  const auto results = run_ranks(3, timeout, [&](int rank, Rendezvous&, Collectives& coll) {
    coll.barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(1500));  // alive, but never joins the all-reduce
      ::_exit(0);
    }
    Stopwatch clock;
    expect_peer_failure(rank, coll, timeout);
    expect(clock.seconds() >= 0.5, "failed before the timeout without a dead peer");
  });
  expect_all_succeeded(results);
}

TEST(LocalCollectives, EveryCollectiveIsTheIdentity) {
  auto coll = collectives_local();
  EXPECT_STREQ(coll->backend(), "local");
  EXPECT_EQ(coll->world_size(), 1);
  std::vector<float> f = {1.5f, -2.0f};
  coll->all_reduce_sum(f.data(), 2);
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f}));
  std::vector<double> d = {3.25};
  coll->all_reduce_sum(d.data(), 1);
  EXPECT_EQ(d[0], 3.25);
  coll->broadcast(f.data(), 2, 0);
  EXPECT_THROW(coll->broadcast(f.data(), 2, 1), CollectiveError);
  const uint64_t in[2] = {4, 5};
  uint64_t out[2] = {0, 0};
  coll->all_gather(in, out, 2);
  EXPECT_EQ(out[1], 5u);
  coll->barrier();
}

TEST(NcclCollectives, RefusesWithoutAGpuOrRunsOnOne) {
  RendezvousConfig c;
  c.master_port = test::free_port();
  Rendezvous rv(c);
#if QSYNC_TEST_WITH_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    auto coll = collectives_nccl(rv, 0);
    EXPECT_STREQ(coll->backend(), "nccl");
    float* data = nullptr;
    ASSERT_EQ(cudaMalloc(&data, 4 * sizeof(float)), cudaSuccess);
    const float host[4] = {1, 2, 3, 4};
    cudaMemcpy(data, host, sizeof host, cudaMemcpyHostToDevice);
    coll->all_reduce_sum(data, 4);
    coll->broadcast(data, 4, 0);
    coll->barrier();
    float back[4] = {};
    cudaMemcpy(back, data, sizeof back, cudaMemcpyDeviceToHost);
    EXPECT_EQ(back[3], 4.0f);
    cudaFree(data);
    return;
  }
#endif
  try {
    collectives_nccl(rv, 0);
    FAIL() << "nccl without a GPU must throw";
  } catch (const CollectiveError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(message.find("no CUDA device") != std::string::npos ||
                message.find("this build has no CUDA") != std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace qsync
