// File: operator/lending/demand_source.h
// Where the lending decision's demand samples come from: an instant PromQL query against a
// Prometheus server's HTTP API (GET URL/api/v1/query?query=Q). A vector's values are added (so
// `rate(x[1m])` over several pods is their total; wrap the query in sum() to be explicit), a
// scalar is taken as is; no series, NaN, an HTTP or PromQL error, or an unreachable server is a
// sample that is not ok, with the reason. The reconciler takes a DemandSource so that tests and
// the simulation can inject theirs.
//
//   PrometheusDemandSource prometheus;
//   const DemandSample s = prometheus.sample("http://prometheus:9090", "sum(rate(requests_total[1m]))");
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "operator/lending/lending_decision.h"

namespace qsync::lending {

class DemandSource {
 public:
  virtual ~DemandSource() = default;
  // Never throws: failures are a sample with ok false and the error.
  virtual DemandSample sample(const std::string& url, const std::string& query) = 0;
};

// The sample of a Prometheus /api/v1/query answer (its JSON body, and the HTTP status).
DemandSample demand_sample_from_prometheus(int http_status, const std::string& body, const std::string& query);

class PrometheusDemandSource : public DemandSource {
 public:
  explicit PrometheusDemandSource(double timeout_seconds = 5) : timeout_seconds_(timeout_seconds) {}
  DemandSample sample(const std::string& url, const std::string& query) override;

 private:
  double timeout_seconds_;
};

}  // namespace qsync::lending
