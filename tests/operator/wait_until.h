// File: tests/operator/wait_until.h
// Polling for the operator's tests: the informers, controllers and managers under test act on
// their own threads, so a test waits for what it expects to become true, up to a timeout it
// chooses (generous: the machine is shared), rather than sleeping a fixed time.
#pragma once

#include <chrono>
#include <functional>

namespace qsync::operator_test {

// Checks `condition` every `poll` until it holds (true) or `timeout` has passed (false; the
// condition is checked once more at the deadline).
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(5));

}  // namespace qsync::operator_test
