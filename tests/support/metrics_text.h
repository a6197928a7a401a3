// File: tests/support/metrics_text.h
// Parses the Prometheus text exposition format (what a /metrics endpoint serves) into samples, so
// tests can look series up by name and labels instead of matching text.
//
//   auto samples = parse_metrics_text(http_get("127.0.0.1", port, "/metrics").body);
//   const MetricSample* s = find_sample(samples, "qsync_worker_loss", {{"rank", "0"}});
#pragma once

#include <map>
#include <string>
#include <vector>

namespace qsync::test {

struct MetricSample {
  std::string name;                          // e.g. qsync_worker_step_duration_seconds_bucket
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

// Throws std::runtime_error naming the line that does not parse.
std::vector<MetricSample> parse_metrics_text(const std::string& text);

// The first sample named `name` whose labels include every pair of `labels`; nullptr when none.
const MetricSample* find_sample(const std::vector<MetricSample>& samples, const std::string& name,
                                const std::map<std::string, std::string>& labels = {});

// All samples named `name` whose labels include every pair of `labels`.
std::vector<MetricSample> find_samples(const std::vector<MetricSample>& samples, const std::string& name,
                                       const std::map<std::string, std::string>& labels = {});

}  // namespace qsync::test
