// File: planner/cli_args.h
// Flag values of the command-line tools (qsync-worker, qsync-plan): whole-string numbers, with errors naming the flag.
#pragma once

#include <cstdint>
#include <string>

namespace qsync {

// "--steps expects an integer, got '12x'"
int64_t parse_int_flag(const std::string& flag, const std::string& value);
double parse_double_flag(const std::string& flag, const std::string& value);

}  // namespace qsync
