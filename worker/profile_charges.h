// File: worker/profile_charges.h
// The profiler's record of one precision's turns (worker/profiler.h), and what it charges to the
// GEMM layers once every turn ran: a pooling that ran in its convolution's output pass
// (Conv2dLayer::fuse_pool), and the INT8 weight copies the optimizer made for the forwards
// (Parameter::int8_rows), so that the replay of any plan adds up to the steps it measured.
//
//   PrecisionRun& run = runs[turn % runs.size()];   // a turn's step: timer, optimizer, ...
//   record_fused_pools(model, run);                  // after each of its forwards
//   charge_fused_pools_to_layers(profile, runs);     // once, after the turns
//   charge_int8_copies_to_layers(profile, desc, model, runs, center);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/layer_precision.h"
#include "planner/model_desc.h"
#include "worker/model.h"
#include "worker/profiler.h"

namespace qsync {

// One precision's measurements.
struct PrecisionRun {
  LayerPrecision mode;
  OpStepSamples timer;
  std::map<std::string, int64_t> saved;
  std::vector<double> optimizer_seconds;
  bool made_int8_rows = false;  // the optimizer made the forwards' INT8 weight copies
  std::map<std::string, std::string> pooled_by;  // a pooling layer -> the convolution that ran it
};

// The element count of GEMM layer `layer`'s weight; throws std::logic_error where it has none.
int64_t weight_numel(const Model& model, const std::string& layer);

// Records which convolutions ran the pooling after them in their output pass this forward.
void record_fused_pools(Model& model, PrecisionRun& run);

// A pooling its convolution ran takes no time of its own in that precision's run, but the replay
// costs the pooling layer from the FP32 run, where it ran alone: the convolution's forward is
// charged the pooling's own time less, so that the two add up.
void charge_fused_pools_to_layers(DeviceProfile& p, const std::vector<PrecisionRun>& runs);

// The optimizer's own cost is what it takes where it makes no INT8 weight copies (the FP32 run).
// Where a run's optimizer made its layers' copies, what that added is the layers' cost, the
// weight casts their forwards no longer run: spread over those forwards by weight count, so a
// plan pays for it by its INT8 layers, as it did before the copies moved.
void charge_int8_copies_to_layers(DeviceProfile& p, const ModelDesc& desc, const Model& model,
                                  const std::vector<PrecisionRun>& runs, SampleCenter center);

}  // namespace qsync
