// File: worker/dist/running_stats_sync.h
// Keeps a model's running statistics (BatchNorm's running mean and variance) equal on every rank
// of a data-parallel job: one all-reduce of the last training forward's batch sums of every layer
// (n, sum, squared deviations, n * mean^2 per channel, in double), then each layer redoes that
// forward's update from the global sums: the statistics of the whole global batch of the
// activations each layer sees (the first BatchNorm's are one process's on the global batch; later
// layers' inputs are normalized per rank), the same bits on every rank (an all-reduce gives every
// rank the same sums). Called once per step, after the gradient sync, in the same order on every
// rank; nothing is sent for a model without running statistics.
#pragma once

#include "worker/dist/collectives.h"
#include "worker/model.h"

namespace qsync {

void running_statistics_all_reduce(Model& model, Collectives& collectives);

}  // namespace qsync
