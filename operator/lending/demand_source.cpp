// File: operator/lending/demand_source.cpp
// Demand samples from a Prometheus instant query over cpprestsdk (see demand_source.h).
#include "operator/lending/demand_source.h"

#include <chrono>
#include <cmath>

#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>

namespace qsync::lending {
namespace {

using nlohmann::json;

DemandSample failed(const std::string& why) {
  DemandSample s;
  s.error = why;
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One [time, "value"] pair of a Prometheus answer.
bool read_point(const json& point, double& at, double& value) {
  if (!point.is_array() || point.size() != 2 || !point[1].is_string()) return false;
  at = point[0].is_number() ? point[0].get<double>() : 0;
  try {
    value = std::stod(point[1].get<std::string>());
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

DemandSample demand_sample_from_prometheus(int http_status, const std::string& body, const std::string& query) {
  const std::string what = "Prometheus query '" + query + "'";
  const json answer = json::parse(body, nullptr, false);
  if (answer.is_discarded() || !answer.is_object())
    return failed(what + " answered HTTP " + std::to_string(http_status) + " with a body that is not JSON");
  if (answer.value("status", "") != "success")
    return failed(what + " failed: " + answer.value("errorType", std::string("error")) + ": " + answer.value("error", std::string("")));
  const json data = answer.value("data", json::object());
  const std::string type = data.value("resultType", "");
  const json result = data.value("result", json());
  DemandSample s;
  double at = 0, value = 0;
  if (type == "scalar") {
    if (!read_point(result, at, value)) return failed(what + " returned a scalar that is not [time, \"value\"]");
    s.value = value;
    s.at = at;
  } else if (type == "vector") {
    if (!result.is_array() || result.empty())
      return failed(what + " returned no series: check the metric name and labels (is the target scraped?)");
    for (const json& series : result) {
      if (!read_point(series.value("value", json()), at, value)) return failed(what + " returned a malformed series");
      s.value += value;
      s.at = std::max(s.at, at);
    }
  } else {
    return failed(what + " returned a " + type + "; the demand needs an instant vector or a scalar");
  }
  if (!std::isfinite(s.value)) return failed(what + " returned " + std::to_string(s.value));
  s.ok = true;
  return s;
}

DemandSample PrometheusDemandSource::sample(const std::string& url, const std::string& query) {
  try {
    web::http::client::http_client_config config;
    config.set_timeout(std::chrono::milliseconds(int64_t(timeout_seconds_ * 1000)));
    web::http::client::http_client client(utility::conversions::to_string_t(url), config);
    web::uri_builder path(U("/api/v1/query"));
    path.append_query(U("query"), utility::conversions::to_string_t(query));
    const web::http::http_response response = client.request(web::http::methods::GET, path.to_string()).get();
    DemandSample s = demand_sample_from_prometheus(response.status_code(), response.extract_utf8string(true).get(), query);
    if (s.ok && s.at == 0) s.at = now_seconds();
    return s;
  } catch (const std::exception& e) {
    return failed("Prometheus at " + url + " is unreachable: " + e.what() + " (set borrow.demand.prometheus.url or --prometheus-url)");
  }
}

}  // namespace qsync::lending
