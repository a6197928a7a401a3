// File: tests/operator/controller/quick_informer_options.h
// Informer options scaled down for tests: no periodic resync, watches the server ends after
// 5-10 s, and retries after 10 ms instead of 800 ms. Tests adjust the rest (page size, backoff
// cap) on the value returned.
#pragma once

#include <string>

#include "operator/controller/informer.h"

namespace qsync::controller_test {

controller::InformerOptions quick_informer_options(const std::string& name);

}  // namespace qsync::controller_test
