// File: tests/kube_api_server/faults.cpp
// Fault rules, response delay and the request log of the test API server.
#include "tests/kube_api_server/faults.h"

#include <algorithm>
#include <cctype>

namespace qsync::kube_test {
namespace {

bool same_word(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

void Faults::fail_next(FaultRule rule) {
  std::lock_guard lock(mu_);
  if (rule.remaining > 0) rules_.push_back(std::move(rule));
}

std::optional<FaultRule> Faults::take(const std::string& verb, const std::string& method, const std::string& path) {
  std::lock_guard lock(mu_);
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    bool verb_matches = it->verb.empty() || it->verb == "*" || same_word(it->verb, verb) || same_word(it->verb, method) ||
                        (same_word(it->verb, "write") && !same_word(method, "GET"));
    if (!verb_matches || path.find(it->path_contains) == std::string::npos) continue;
    FaultRule taken = *it;
    if (--it->remaining <= 0) rules_.erase(it);
    return taken;
  }
  return std::nullopt;
}

void Faults::set_delay(std::chrono::milliseconds delay) {
  std::lock_guard lock(mu_);
  delay_ = delay;
}

std::chrono::milliseconds Faults::delay() const {
  std::lock_guard lock(mu_);
  return delay_;
}

void Faults::clear() {
  std::lock_guard lock(mu_);
  rules_.clear();
  delay_ = std::chrono::milliseconds(0);
}

size_t Faults::pending_rules() const {
  std::lock_guard lock(mu_);
  return rules_.size();
}

void RequestLog::record(std::string line) {
  std::lock_guard lock(mu_);
  lines_.push_back(std::move(line));
  if (lines_.size() > capacity_) lines_.erase(lines_.begin(), lines_.begin() + (lines_.size() - capacity_));
}

std::vector<std::string> RequestLog::lines() const {
  std::lock_guard lock(mu_);
  return lines_;
}

std::string RequestLog::text() const {
  std::string out;
  for (const auto& line : lines()) out += line + "\n";
  return out;
}

}  // namespace qsync::kube_test
