// File: planner/plan_file.h
// Per-rank plan files: which precision each GEMM-like layer computes in, the rank's local batch
// and device class. Written by the planner (and `qsync run`), read by the worker.
//
//   model: cnn-fmnist
//   model_hash: "9f2c..."         # optional; when present it must match the model file
//   rank: 1                        # optional
//   device_class: cpu-avx2         # optional
//   local_batch: 64                # optional
//   predicted_step_seconds: 0.081  # optional
//   default: fp32                  # precision of layers not listed (default fp32)
//   layers:
//     conv1: int8
//     fc: bf16
#pragma once

#include <map>
#include <optional>
#include <string>

#include "planner/layer_precision.h"
#include "planner/model_desc.h"

namespace qsync {

struct RankPlan {
  std::string model;
  std::optional<uint64_t> model_hash;
  std::optional<int> rank;
  std::string device_class;
  int64_t local_batch = 0;  // 0: not set
  double predicted_step_seconds = 0;
  LayerPrecision default_precision = LayerPrecision::FP32;
  std::map<std::string, LayerPrecision> layers;

  // The precision of a GEMM-like layer under this plan.
  LayerPrecision precision_of(const std::string& layer) const;
};

// A plan with every GEMM layer of `m` at `p`.
RankPlan plan_uniform(const ModelDesc& m, LayerPrecision p);

// Reads a plan and checks it against the model: a plan for another model, an unknown layer or an
// unknown precision throws std::invalid_argument naming the file, the entry and the fix.
RankPlan plan_file_load(const std::string& path, const ModelDesc& m);
RankPlan plan_parse(const std::string& yaml_text, const std::string& source_name, const ModelDesc& m);
std::string plan_to_yaml(const RankPlan& p);
// Written atomically (temp file, fsync, rename).
void plan_file_write(const std::string& path, const RankPlan& p);

}  // namespace qsync
