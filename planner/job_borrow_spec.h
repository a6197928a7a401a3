// File: planner/job_borrow_spec.h
// The job fields of off-peak borrowing (docs/borrowing.md): spec.pool.inference[].borrow (the
// inference workload to borrow GPUs from, when lending is allowed, how fast they come back) and
// spec.elasticPolicy (the world size's bounds), as types, as rows of the field table
// (job_fields.cpp adds them), their JSON form, and the rules the table cannot state. The
// operator (operator/reconciler/job_borrowing.h) turns them into the lending policy and parses
// the cron windows and time zones, refusing bad ones with the field's path.
//
//   borrow:
//     workload: {kind: Deployment, name: chat}        # or selector: {app: chat}
//     minServingReplicas: 2
//     reclaimGraceSeconds: 300
//     lendCooldownSeconds: 300
//     windows: [{start: "0 20 * * *", end: "0 7 * * *", timeZone: America/New_York}]
//     demand:
//       prometheus: {url: http://prometheus:9090, query: 'sum(rate(requests_total[1m]))'}
//       threshold: 50          # or requestsPerReplica: 20, or queueing: {...}
//       headroomPercent: 20
//   elasticPolicy: {minRanks: 2, maxRanks: 16, growCooldownSeconds: 300, minGrowthPercent: 5}
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync {

struct Field;

struct WorkloadReference {
  std::string kind = "Deployment";  // Deployment | StatefulSet
  std::string name;                 // exactly one of name and selector
  std::map<std::string, std::string> selector;
  bool operator==(const WorkloadReference&) const = default;
};

struct LendingWindowSpec {
  std::string start, end;  // cron expressions: the window opens at start and closes at the next end
  std::string time_zone = "UTC";
  bool operator==(const LendingWindowSpec&) const = default;
};

struct PrometheusQuery {
  std::string url;  // "": the operator's --prometheus-url
  std::string query;
  bool operator==(const PrometheusQuery&) const = default;
};

struct QueueingSizing {  // M/M/c: the query is the arrival rate in requests per second
  std::string service_time;        // "200ms": mean service time of a request on one server
  double service_time_seconds = 0;
  int64_t servers_per_replica = 1;  // requests a replica serves at once
  std::string wait_target;         // "50ms": the queueing delay allowed at wait_quantile
  double wait_target_seconds = 0;
  double wait_quantile = 0.99;     // 0: the target is on the mean wait
  bool operator==(const QueueingSizing&) const = default;
};

struct DemandSignal {  // exactly one of threshold, requests_per_replica, queueing
  PrometheusQuery prometheus;
  std::optional<double> threshold;
  std::optional<double> requests_per_replica;
  std::optional<QueueingSizing> queueing;
  double headroom_percent = 20;
  int64_t max_sample_age_seconds = 120;
  bool operator==(const DemandSignal&) const = default;
};

struct BorrowSpec {
  WorkloadReference workload;
  int64_t min_serving_replicas = 1;
  std::vector<LendingWindowSpec> windows;
  std::optional<DemandSignal> demand;
  int64_t reclaim_grace_seconds = 300;
  int64_t lend_cooldown_seconds = 300;
  bool operator==(const BorrowSpec&) const = default;
};

struct ElasticPolicy {
  int64_t min_ranks = 1;
  std::optional<int64_t> max_ranks;  // absent: the pool's counts
  int64_t grow_cooldown_seconds = 300;
  double min_growth_percent = 5;  // a growth must be predicted this much faster
  bool operator==(const ElasticPolicy&) const = default;
};

// The table's rows under `prefix` ("spec.pool.inference[].borrow"), and spec.elasticPolicy.
void add_borrow_fields(std::vector<Field>& fields, const std::string& prefix);
void add_elastic_policy_fields(std::vector<Field>& fields);

// Reads a validated (defaulted, field-checked) object; problems name the field.
BorrowSpec borrow_spec_from(const nlohmann::json& borrow, const std::string& where, std::vector<std::string>& problems);
ElasticPolicy elastic_policy_from(const nlohmann::json& policy);
nlohmann::json to_json(const BorrowSpec& b);
nlohmann::json to_json(const ElasticPolicy& e);

// The rules the table cannot state: exactly one workload name or selector, exactly one demand
// sizing, windows or demand (say when lending is allowed), offPeakOnly only with borrow,
// minRanks <= maxRanks. (borrow on a training entry is an unknown field of the table.)
void check_borrow_rules(const nlohmann::json& spec, std::vector<std::string>& problems);

}  // namespace qsync
