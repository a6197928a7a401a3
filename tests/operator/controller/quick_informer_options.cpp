// File: tests/operator/controller/quick_informer_options.cpp
// quick_informer_options(): the informer settings the controller tests start from
// (quick_informer_options.h).
#include "tests/operator/controller/quick_informer_options.h"

namespace qsync::controller_test {

controller::InformerOptions quick_informer_options(const std::string& name) {
  controller::InformerOptions o;
  o.name = name;
  o.resync_period = std::chrono::milliseconds(0);
  o.min_watch_timeout_seconds = 5;
  o.max_watch_timeout_seconds = 10;
  o.initial_backoff = std::chrono::milliseconds(10);
  return o;
}

}  // namespace qsync::controller_test
