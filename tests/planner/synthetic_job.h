// File: tests/planner/synthetic_job.h
// Synthetic inputs for the replayer and allocator tests: a chain-of-linear-layers model parsed
// from YAML, and device profiles built by hand (per GEMM layer and precision: forward/backward
// seconds, saved and weight bytes at the profile batch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/model_desc.h"

namespace qsync::testing {

// flatten, then linear layers fc0..fc{n-1} with the given widths (the last is the class count),
// on a 1x4x4 image input (16 features).
inline ModelDesc chain_model(const std::vector<int64_t>& widths, const std::string& name = "chain") {
  std::string y = "name: " + name + "\ntask: classification\ninput: {kind: image, shape: [1, 4, 4]}\nclasses: " +
                  std::to_string(widths.back()) + "\nlayers:\n  - {name: flatten, type: flatten}\n";
  for (size_t i = 0; i < widths.size(); ++i)
    y += "  - {name: fc" + std::to_string(i) + ", type: linear, out: " + std::to_string(widths[i]) + "}\n";
  return model_desc_parse(y, name + ".yaml");
}

// An empty profile of `m` for a class at a batch.
inline DeviceProfile blank_profile(const ModelDesc& m, const std::string& device_class, int64_t batch) {
  DeviceProfile p;
  p.model = m.name;
  p.model_hash = m.hash;
  p.device_class = device_class;
  p.batch = batch;
  p.source = "synthetic (test)";
  return p;
}

inline LayerCost cost(double fwd, double bwd, int64_t saved = 0, int64_t weight = 0) {
  LayerCost c;
  c.forward_seconds = fwd;
  c.backward_seconds = bwd;
  c.saved_bytes = saved;
  c.weight_bytes = weight;
  return c;
}

// A small deterministic generator (tests must not depend on the platform's distributions).
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : s_(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  double uniform() {  // [0, 1)
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return double(s_ >> 11) * (1.0 / 9007199254740992.0);
  }
  double range(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  uint64_t s_;
};

}  // namespace qsync::testing
