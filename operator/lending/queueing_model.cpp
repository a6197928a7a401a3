// File: operator/lending/queueing_model.cpp
// Erlang C through Erlang B's recurrence, wait mean and quantiles, and the smallest server count
// for a wait target (see queueing_model.h).
#include "operator/lending/queueing_model.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace qsync::lending {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

void check(double arrival_rate, double service_seconds) {
  if (!(arrival_rate >= 0) || !std::isfinite(arrival_rate))
    throw std::invalid_argument("arrival rate must be a finite number >= 0, got " + std::to_string(arrival_rate));
  if (!(service_seconds > 0) || !std::isfinite(service_seconds))
    throw std::invalid_argument("service time must be a finite number > 0, got " + std::to_string(service_seconds));
}

}  // namespace

double erlang_c(int64_t c, double a) {
  if (c < 1) throw std::invalid_argument("erlang_c: c must be >= 1, got " + std::to_string(c));
  if (!(a >= 0)) throw std::invalid_argument("erlang_c: offered load must be >= 0");
  if (a >= double(c)) return 1.0;
  double b = 1.0;  // Erlang B with 0 servers
  for (int64_t k = 1; k <= c; ++k) b = a * b / (double(k) + a * b);
  return double(c) * b / (double(c) - a * (1.0 - b));
}

double mean_wait_seconds(int64_t c, double arrival_rate, double service_seconds) {
  check(arrival_rate, service_seconds);
  const double a = arrival_rate * service_seconds;
  if (a >= double(c)) return INF;
  if (arrival_rate == 0) return 0;
  return erlang_c(c, a) / (double(c) / service_seconds - arrival_rate);
}

double wait_quantile_seconds(int64_t c, double arrival_rate, double service_seconds, double q) {
  check(arrival_rate, service_seconds);
  if (!(q > 0 && q < 1)) throw std::invalid_argument("wait quantile must be in (0, 1), got " + std::to_string(q));
  const double a = arrival_rate * service_seconds;
  if (a >= double(c)) return INF;
  if (arrival_rate == 0) return 0;
  const double waiting = erlang_c(c, a);
  if (waiting <= 1 - q) return 0;  // at least a fraction q never waits
  return std::log(waiting / (1 - q)) / (double(c) / service_seconds - arrival_rate);
}

int64_t servers_for_wait(double arrival_rate, double service_seconds, double q, double target_seconds) {
  check(arrival_rate, service_seconds);
  if (!(target_seconds >= 0)) throw std::invalid_argument("wait target must be >= 0 seconds");
  if (q == 0 && target_seconds == 0 && arrival_rate > 0)
    throw std::invalid_argument("a mean wait of 0 needs infinitely many servers: give a positive target or a quantile");
  const double a = arrival_rate * service_seconds;
  int64_t c = std::max<int64_t>(1, int64_t(std::floor(a)) + 1);
  auto wait = [&](int64_t n) {
    return q > 0 ? wait_quantile_seconds(n, arrival_rate, service_seconds, q)
                 : mean_wait_seconds(n, arrival_rate, service_seconds);
  };
  // The wait falls as c grows; a zero target ends once P(wait > 0) <= 1-q (or the mean is 0).
  const int64_t limit = c + 100000;
  while (wait(c) > target_seconds) {
    if (++c > limit) throw std::invalid_argument("no server count under " + std::to_string(limit) + " meets the wait target");
  }
  return c;
}

int64_t replicas_for_demand(const QueueingTarget& target, double arrival_rate) {
  if (target.servers_per_replica < 1) throw std::invalid_argument("serversPerReplica must be >= 1");
  const int64_t servers =
      servers_for_wait(arrival_rate, target.service_seconds, target.wait_quantile, target.wait_target_seconds);
  return (servers + target.servers_per_replica - 1) / target.servers_per_replica;
}

}  // namespace qsync::lending
