// File: tests/kube_api_server/faults.h
// Fault injection for the test API server: fail the next N requests that match a verb and a
// path fragment with a chosen HTTP code, and delay every response. (Closing watches,
// dropping connections and compacting history act on the server directly: see ApiServer.)
// Thread-safe.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace qsync::kube_test {

struct FaultRule {
  // Matches a Kubernetes verb (get, list, watch, create, update, patch, delete), an HTTP
  // method (GET, PUT, ...), "write" (any non-GET) or "" / "*" (anything); case-insensitive.
  std::string verb;
  std::string path_contains;  // "" matches every path
  int code = 500;             // 409, 410, 429, 500, ...
  int remaining = 1;          // requests still to fail
  std::string message;        // the Status message ("" for a default naming the fault)
};

class Faults {
 public:
  void fail_next(FaultRule rule);
  // The rule that fails this request (its count taken), if any.
  std::optional<FaultRule> take(const std::string& verb, const std::string& method, const std::string& path);
  void set_delay(std::chrono::milliseconds delay);
  std::chrono::milliseconds delay() const;
  void clear();  // no rules, no delay
  size_t pending_rules() const;

 private:
  mutable std::mutex mu_;
  std::vector<FaultRule> rules_;
  std::chrono::milliseconds delay_{0};
};

// A ring buffer of the last exchanges ("PATCH /apis/... [content-type] -> 422 {body}"), kept
// so a failing test can show what the server saw. Thread-safe.
class RequestLog {
 public:
  explicit RequestLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  void record(std::string line);
  std::vector<std::string> lines() const;
  std::string text() const;  // one exchange a line

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  std::vector<std::string> lines_;
};

}  // namespace qsync::kube_test
