// File: worker/dist/running_stats_sync.cpp
// One all-reduce of every layer's batch sums, then the layers' global updates (see the header).
#include "worker/dist/running_stats_sync.h"

#include <vector>

namespace qsync {

void running_statistics_all_reduce(Model& model, Collectives& collectives) {
  const std::vector<RunningStatistics*>& layers = model.running_statistics();
  if (layers.empty()) return;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const RunningStatistics* r : layers) {
    offsets.push_back(total);
    total += r->batch_sums_size();
  }
  std::vector<double> sums(size_t(total), 0.0);
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->batch_sums(sums.data() + offsets[i]);
  collectives.all_reduce_sum(sums.data(), total);
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->update_from_sums(sums.data() + offsets[i]);
}

}  // namespace qsync
