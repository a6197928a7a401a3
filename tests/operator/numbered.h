// File: tests/operator/numbered.h
// Numbered names for the objects and keys the operator's tests make in loops ("cm-3", "ns/k12").
#pragma once

#include <string>

namespace qsync::operator_test {

// `prefix` followed by `i` in decimal. (Spelled out rather than `prefix + std::to_string(i)`:
// GCC 12 gives a false -Wrestrict positive on `const char* + std::string&&`.)
std::string numbered(const char* prefix, int i);

}  // namespace qsync::operator_test
