// File: tests/operator/numbered.cpp
// numbered(): "prefix" + i for the operator's tests (numbered.h).
#include "tests/operator/numbered.h"

namespace qsync::operator_test {

std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s.append(std::to_string(i));
  return s;
}

}  // namespace qsync::operator_test
