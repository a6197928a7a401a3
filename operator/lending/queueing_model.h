// File: operator/lending/queueing_model.h
// How many inference replicas a demand needs: the M/M/c queue (Poisson arrivals at rate lambda,
// exponential service of mean S on each of c servers, one shared queue) and Erlang's C formula.
//   offered load a = lambda * S (Erlangs), utilization rho = a / c (stable only when rho < 1)
//   C(c, a)        = probability that a request waits (Erlang C)
//   mean wait      Wq = C / (c/S - lambda)
//   wait quantile  P(Wq > t) = C * exp(-(c/S - lambda) t)  =>  t_q = ln(C / (1-q)) / (c/S - lambda)
//                  when C > 1-q, else 0
// A replica that serves k requests at once is k servers (serversPerReplica). Erlang C is
// computed through Erlang B's recurrence (B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1)),
// C = c B / (c - a (1 - B))), which stays finite for thousands of servers where a^c / c! does
// not. docs/borrowing.md derives the sizing rule and its caveats (batching, bursts, cold starts).
//
//   erlang_c(6, 2.5)                                   // 0.047 (Wolfram's example: 30/h, 5 min)
//   servers_for_wait(30.0 / 3600, 300, 0.9, 0)         // 6: P(wait > 0) <= 10 %
//   replicas_for_demand({.service_seconds = 0.2, .servers_per_replica = 4,
//                        .wait_target_seconds = 0.05, .wait_quantile = 0.99}, 120.0)
#pragma once

#include <cstdint>

namespace qsync::lending {

// Probability that an arrival waits in an M/M/c queue with offered load `a` Erlangs; 1 when
// the queue is unstable (a >= c). Requires c >= 1, a >= 0.
double erlang_c(int64_t c, double a);

// Mean queueing delay (seconds) with c servers; infinity when unstable.
double mean_wait_seconds(int64_t c, double arrival_rate, double service_seconds);

// The q-quantile of the queueing delay (0 < q < 1); infinity when unstable.
double wait_quantile_seconds(int64_t c, double arrival_rate, double service_seconds, double q);

// The smallest c (>= 1) that is stable and whose wait meets `target_seconds`: at quantile q
// when 0 < q < 1, the mean wait when q == 0. arrival_rate 0 needs 1 server.
int64_t servers_for_wait(double arrival_rate, double service_seconds, double q, double target_seconds);

struct QueueingTarget {
  double service_seconds = 0;      // mean service time of one request on one server
  int64_t servers_per_replica = 1;  // requests a replica serves at once
  double wait_target_seconds = 0;  // queueing delay allowed at wait_quantile
  double wait_quantile = 0.99;     // 0: the target is on the mean wait
};

// Replicas for `arrival_rate` requests/s: ceil(servers_for_wait / servers_per_replica).
int64_t replicas_for_demand(const QueueingTarget& target, double arrival_rate);

}  // namespace qsync::lending
