// File: tests/operator/wait_until.cpp
// wait_until: the polling loop the operator's tests wait with (wait_until.h).
#include "tests/operator/wait_until.h"

#include <thread>

namespace qsync::operator_test {

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll);
  }
  return condition();
}

}  // namespace qsync::operator_test
