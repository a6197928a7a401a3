// File: tests/kube_api_server/request_summary.cpp
// The cumulative per-(verb, group, resource) request counter of the test API server.
#include "tests/kube_api_server/request_summary.h"

namespace qsync::kube_test {

void RequestSummary::count(const std::string& verb, const std::string& group, const std::string& resource,
                           int http_status) {
  std::lock_guard lock(mu_);
  Counts& c = counts_[{group, resource, verb}];
  ++c.total;
  if (http_status >= 400) ++c.failed;
}

nlohmann::json RequestSummary::to_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json requests = nlohmann::json::array();
  for (const auto& [key, c] : counts_) {
    const auto& [group, resource, verb] = key;
    requests.push_back({{"verb", verb}, {"group", group}, {"resource", resource}, {"count", c.total}, {"failed", c.failed}});
  }
  return {{"requests", requests}};
}

}  // namespace qsync::kube_test
