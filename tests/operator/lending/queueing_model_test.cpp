// File: tests/operator/lending/queueing_model_test.cpp
// The M/M/c model: Erlang C against the textbook formula and a published example, M/M/1's
// closed forms, the server count for a wait target (the smallest that meets it), thousands of
// servers without overflow, and the wait quantile against a discrete-event simulation of the
// queue.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <vector>

#include "operator/lending/queueing_model.h"

namespace qsync::lending {
namespace {

// C(c, a) = [a^c/c! * c/(c-a)] / [sum_{k<c} a^k/k! + a^c/c! * c/(c-a)], directly.
double erlang_c_textbook(int c, double a) {
  double term = 1, sum = 0;
  for (int k = 0; k < c; ++k) {
    sum += term;
    term *= a / double(k + 1);
  }
  const double top = term * double(c) / (double(c) - a);
  return top / (sum + top);
}

TEST(QueueingModelTest, ErlangCMatchesTheTextbookFormula) {
  for (int c : {1, 2, 3, 5, 8, 13})
    for (double a : {0.1, 0.5, 0.9 * c, 0.99 * c})
      if (a < c) {
        EXPECT_NEAR(erlang_c(c, a), erlang_c_textbook(c, a), 1e-12) << "c=" << c << " a=" << a;
      }
}

TEST(QueueingModelTest, WolframsCallCentreExample) {
  // 30 calls an hour, 5 minutes each: a = 2.5 Erlangs (reference.wolfram.com ErlangC).
  EXPECT_NEAR(erlang_c(5, 2.5), 0.130, 0.0005);
  EXPECT_NEAR(erlang_c(6, 2.5), 0.047, 0.0005);
  // At most 10 % of calls wait: 6 agents, and 5 do not do.
  EXPECT_EQ(servers_for_wait(30.0 / 3600, 300, 0.9, 0), 6);
}

TEST(QueueingModelTest, MM1ClosedForms) {
  const double lambda = 3, s = 0.25, rho = lambda * s, mu = 1 / s;
  EXPECT_NEAR(erlang_c(1, rho), rho, 1e-12);
  EXPECT_NEAR(mean_wait_seconds(1, lambda, s), rho / (mu - lambda), 1e-12);
  // P(Wq > t) = rho e^{-(mu - lambda) t}
  const double t99 = wait_quantile_seconds(1, lambda, s, 0.99);
  EXPECT_NEAR(rho * std::exp(-(mu - lambda) * t99), 0.01, 1e-12);
}

TEST(QueueingModelTest, UnstableAndIdleQueues) {
  EXPECT_EQ(erlang_c(4, 4.0), 1.0);
  EXPECT_TRUE(std::isinf(mean_wait_seconds(4, 20, 0.2)));
  EXPECT_TRUE(std::isinf(wait_quantile_seconds(4, 20, 0.2, 0.99)));
  EXPECT_EQ(mean_wait_seconds(3, 0, 0.2), 0);
  EXPECT_EQ(servers_for_wait(0, 0.2, 0.99, 0.05), 1);
  EXPECT_THROW(servers_for_wait(1, 0, 0.99, 0.05), std::invalid_argument);
  EXPECT_THROW(servers_for_wait(1, 0.2, 0, 0), std::invalid_argument);  // mean wait 0: impossible
  EXPECT_THROW(wait_quantile_seconds(2, 1, 0.2, 1.0), std::invalid_argument);
}

TEST(QueueingModelTest, ServersForWaitIsTheSmallestThatMeetsTheTarget) {
  for (double lambda : {0.5, 7.0, 40.0, 300.0}) {
    const double s = 0.2, target = 0.05;
    const int64_t c = servers_for_wait(lambda, s, 0.99, target);
    EXPECT_LE(wait_quantile_seconds(c, lambda, s, 0.99), target) << lambda;
    if (c > 1) {
      EXPECT_GT(wait_quantile_seconds(c - 1, lambda, s, 0.99), target) << lambda;
    }
    const int64_t mean_c = servers_for_wait(lambda, s, 0, target);
    EXPECT_LE(mean_wait_seconds(mean_c, lambda, s), target);
    EXPECT_LE(mean_c, c) << "the mean is met with no more servers than the 99th percentile";
  }
}

TEST(QueueingModelTest, ThousandsOfServersStayFinite) {
  const int64_t c = servers_for_wait(9000, 0.5, 0.99, 0.01);  // a = 4500 Erlangs
  EXPECT_GT(c, 4500);
  EXPECT_LT(c, 4800);  // pooling: a large queue needs little headroom
  EXPECT_TRUE(std::isfinite(erlang_c(c, 4500)));
}

TEST(QueueingModelTest, ReplicasRoundUpServersPerReplica) {
  QueueingTarget t{.service_seconds = 0.2, .servers_per_replica = 4, .wait_target_seconds = 0.05, .wait_quantile = 0.99};
  const int64_t servers = servers_for_wait(100, 0.2, 0.99, 0.05);
  EXPECT_EQ(replicas_for_demand(t, 100), (servers + 3) / 4);
  t.servers_per_replica = 0;
  EXPECT_THROW(replicas_for_demand(t, 100), std::invalid_argument);
}

// An M/M/c queue simulated (FIFO, c servers): the wait quantile the formula predicts.
double simulated_wait_quantile(int c, double lambda, double s, double q, int arrivals, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(lambda), service(1 / s);
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int k = 0; k < c; ++k) free_at.push(0);
  std::vector<double> waits;
  double t = 0;
  for (int i = 0; i < arrivals; ++i) {
    t += gap(rng);
    const double start = std::max(t, free_at.top());
    free_at.pop();
    free_at.push(start + service(rng));
    if (i > arrivals / 10) waits.push_back(start - t);  // past the warm-up
  }
  std::sort(waits.begin(), waits.end());
  return waits[size_t(q * double(waits.size()))];
}

TEST(QueueingModelTest, WaitQuantileMatchesASimulatedQueue) {
  // rho = 0.9 on 4 servers: a fifth of the requests wait; the 99th percentile of the wait.
  const int c = 4;
  const double lambda = 18, s = 0.2;
  const double predicted = wait_quantile_seconds(c, lambda, s, 0.99);
  const double simulated = simulated_wait_quantile(c, lambda, s, 0.99, 400000, 7);
  // Sampling error of a 99th percentile over ~360k waits with this autocorrelation: ~10 %.
  EXPECT_NEAR(simulated / predicted, 1.0, 0.15) << "predicted " << predicted << " s, simulated " << simulated << " s";
  const double mean_predicted = mean_wait_seconds(c, lambda, s);
  EXPECT_GT(mean_predicted, 0);
}

}  // namespace
}  // namespace qsync::lending
