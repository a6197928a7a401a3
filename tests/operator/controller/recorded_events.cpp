// File: tests/operator/controller/recorded_events.cpp
// RecordedEvents: handler lines kept under a mutex, with a wait for a count (recorded_events.h).
#include "tests/operator/controller/recorded_events.h"

namespace qsync::controller_test {

void RecordedEvents::push(std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.push_back(std::move(line));
  cv_.notify_all();
}

std::vector<std::string> RecordedEvents::wait_for(size_t count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return lines_.size() >= count; });
  return lines_;
}

std::vector<std::string> RecordedEvents::all() {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

void RecordedEvents::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.clear();
}

}  // namespace qsync::controller_test
