// File: operator/controller/micro_time.h
// Kubernetes MicroTime: RFC 3339 UTC with microseconds, "2026-11-29T20:31:50.123456Z", as Lease
// acquireTime and renewTime carry.
#pragma once

#include <chrono>
#include <string>

namespace qsync::controller {

std::string micro_time_format(std::chrono::system_clock::time_point t);
std::string micro_time_now();
// Accepts MicroTime and plain RFC 3339 seconds ("...Z"). Throws std::invalid_argument naming the
// text when it is not such a time.
std::chrono::system_clock::time_point micro_time_parse(const std::string& text);

}  // namespace qsync::controller
