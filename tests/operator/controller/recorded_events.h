// File: tests/operator/controller/recorded_events.h
// The lines an informer's event handlers record in the controller tests ("ADDED ns/a 101"),
// kept thread-safely: handlers run on the informer's thread, the test reads on its own. A test
// derives its EventLog from it, adding the handler that formats the lines it checks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace qsync::controller_test {

class RecordedEvents {
 public:
  void push(std::string line);
  // Waits until at least `count` lines were recorded or `timeout` passed; returns them all.
  std::vector<std::string> wait_for(size_t count, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  std::vector<std::string> all();
  void clear();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

}  // namespace qsync::controller_test
