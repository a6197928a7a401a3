// File: tests/kube_api_server/request_summary.h
// A cumulative count of the resource requests the test API server has answered, keyed by
// (Kubernetes verb, API group, resource[/subresource]), with how many of them failed (HTTP
// 400 and above). Unlike the request log it never drops anything, so a test can check every
// call a client made against an RBAC contract: GET /_test/requests?summary=1 serves it.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

class RequestSummary {
 public:
  // `resource` is the plural, with "/subresource" appended for subresource requests.
  void count(const std::string& verb, const std::string& group, const std::string& resource, int http_status);

  // {"requests": [{"verb", "group", "resource", "count", "failed"}, ...]} sorted by group,
  // resource, verb.
  nlohmann::json to_json() const;

 private:
  struct Counts {
    int64_t total = 0;
    int64_t failed = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, Counts> counts_;  // (group, resource, verb)
};

}  // namespace qsync::kube_test
