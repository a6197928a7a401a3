// File: worker/tp/spd_block_inputs.cpp
// Calibration inputs of one block: the simulation runs over consecutive, non-overlapping windows
// of the calibration tokens (each from an empty cache, eight windows per prefill) with a block
// input observer that copies block `block`'s input X, so the blocks before it run as currently
// deployed (the simulation's dropped set). Also the check of such inputs against a model, which
// distillation and head grouping start with.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/tp/spd_block_shards.h"
#include "worker/tp/spd_recovery.h"
#include "worker/tp/tp_transformer.h"

namespace qsync {

namespace {

constexpr int64_t WINDOWS_PER_FORWARD = 8;

void check_inputs(const TransformerWeights& w, int64_t block, const BlockInputs& inputs) {
  if (block < 0 || block >= int64_t(w.blocks.size()))
    throw std::invalid_argument("SPD recovery: block " + std::to_string(block) + " is out of range; the model has " +
                                std::to_string(w.blocks.size()) + " blocks (0.." +
                                std::to_string(int64_t(w.blocks.size()) - 1) + ")");
  if (inputs.width != w.width)
    throw std::invalid_argument("SPD recovery: calibration inputs have width " + std::to_string(inputs.width) +
                                ", the model's width is " + std::to_string(w.width) +
                                "; collect them with spd_block_inputs on a simulation of this model");
  if (inputs.sequences < 1 || inputs.tokens < 1 ||
      int64_t(inputs.x.size()) != inputs.sequences * inputs.tokens * inputs.width)
    throw std::invalid_argument("SPD recovery: calibration inputs hold " + std::to_string(inputs.x.size()) +
                                " values, expected sequences * tokens * width = " +
                                std::to_string(inputs.sequences) + " * " + std::to_string(inputs.tokens) + " * " +
                                std::to_string(inputs.width) + " (and at least one sequence)");
  if (w.max_tokens > 0 && inputs.tokens > w.max_tokens)
    throw std::invalid_argument("SPD recovery: calibration windows of " + std::to_string(inputs.tokens) +
                                " tokens are longer than the model's " + std::to_string(w.max_tokens) + " positions");
}

}  // namespace

BlockShape spd_recovery_block_shape(const TransformerWeights& w, int64_t block, const BlockInputs& inputs) {
  check_inputs(w, block, inputs);
  return block_shape_check(w.blocks[size_t(block)], w.width, w.mlp_width, w.causal, block);
}

BlockInputs spd_block_inputs(TpTransformer& sim, const std::vector<int32_t>& tokens, int64_t window,
                             int64_t max_windows, int64_t block, int64_t stride) {
  if (block < 0 || block >= sim.blocks())
    throw std::invalid_argument("spd_block_inputs: block " + std::to_string(block) + " is out of range; the model has " +
                                std::to_string(sim.blocks()) + " blocks (0.." + std::to_string(sim.blocks() - 1) + ")");
  if (window < 1 || window > sim.max_tokens())
    throw std::invalid_argument("spd_block_inputs: window " + std::to_string(window) + " must be in 1.." +
                                std::to_string(sim.max_tokens()) + " (the model's context)");
  if (stride == 0) stride = window;
  if (stride < window)
    throw std::invalid_argument("spd_block_inputs: stride " + std::to_string(stride) + " is shorter than the window " +
                                std::to_string(window) + "; windows may not overlap");
  const int64_t have = int64_t(tokens.size());
  int64_t windows = have < window ? 0 : (have - window) / stride + 1;  // window k needs k * stride + window
  if (max_windows > 0 && windows > max_windows) windows = max_windows;
  if (windows < 1)
    throw std::invalid_argument("spd_block_inputs: " + std::to_string(tokens.size()) +
                                " calibration tokens do not fill one window of " + std::to_string(window) +
                                "; give more calibration text or a shorter window");
  BlockInputs in;
  in.sequences = windows;
  in.tokens = window;
  in.width = sim.width();
  in.x.reserve(size_t(windows * window * in.width));
  sim.set_block_input_observer([&in, block](int64_t b, const float* x, int64_t rows) {
    if (b == block) in.x.insert(in.x.end(), x, x + rows * in.width);
  });
  try {
    for (int64_t first = 0; first < windows; first += WINDOWS_PER_FORWARD) {
      const int64_t n = std::min(WINDOWS_PER_FORWARD, windows - first);
      sim.reset(n);
      std::vector<int32_t> batch;  // (n, window)
      for (int64_t k = first; k < first + n; ++k)
        batch.insert(batch.end(), tokens.begin() + k * stride, tokens.begin() + k * stride + window);
      sim.forward(batch, n);  // (n, window): X arrives as (n * window, C), sequence by sequence
    }
  } catch (...) {
    sim.set_block_input_observer(nullptr);
    throw;
  }
  sim.set_block_input_observer(nullptr);
  return in;
}

}  // namespace qsync
