// File: worker/checkpoint.h
// Training checkpoints: weights, optimizer state, running statistics, step, data position and seed, in one binary
// file with a versioned header (magic, version, model hash) and a trailing checksum, written
// atomically (temp file + fsync + rename). A checkpoint of another model, a truncated or corrupt
// file, or a parameter whose name or size differs is refused with an error naming the cause.
#pragma once

#include <string>

#include "worker/loss_scale.h"
#include "worker/model.h"
#include "worker/optimizer.h"

namespace qsync {

struct CheckpointMeta {
  int64_t step = 0;            // steps completed
  int64_t data_epoch = 0;      // data loader position
  int64_t data_index = 0;
  uint64_t seed = 0;
  uint64_t model_hash = 0;
  LossScaleState loss_scale;   // dynamic loss scaling's state (version 2; version 1: the defaults)
  uint32_t version = 0;        // checkpoint_load: the file's format version (saving writes the current one)
};

// Version 2 adds the loss-scale state, version 3 the running statistics (BatchNorm's running mean
// and variance, Model::running_statistics). Versions 1 and 2 still load: they hold no running
// statistics, so the model keeps its own (the ONNX file's values); meta.version tells the caller.
inline constexpr uint32_t CHECKPOINT_VERSION = 3;

// <dir>/latest.qckpt: the newest checkpoint of a directory, for readers that take one file
// (worker/checkpoint_store.h keeps the last few as step-<N>.qckpt and this name beside them).
std::string checkpoint_path(const std::string& dir);
void checkpoint_save(const std::string& path, const Model& model, Optimizer& opt, const CheckpointMeta& meta);
// Restores weights and optimizer state into `model`/`opt`; returns the meta.
CheckpointMeta checkpoint_load(const std::string& path, Model& model, Optimizer& opt);
// The optimizer a checkpoint was written with (checkpoint_load needs an optimizer of that kind).
// Throws as checkpoint_load does for a file that is not a readable checkpoint.
OptimizerKind checkpoint_optimizer_kind(const std::string& path);
// The step a checkpoint was written at, from its header (throws as checkpoint_optimizer_kind).
int64_t checkpoint_step(const std::string& path);

}  // namespace qsync
