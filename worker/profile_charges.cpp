// File: worker/profile_charges.cpp
// What the profiler charges to the GEMM layers after its turns (worker/profile_charges.h).
#include "worker/profile_charges.h"

#include <algorithm>
#include <stdexcept>

#include "worker/layers/conv2d.h"

namespace qsync {

int64_t weight_numel(const Model& model, const std::string& layer) {
  for (const Parameter* p : model.parameters())
    if (p->name == layer + ".weight") return p->value.numel();
  throw std::logic_error("profile: GEMM layer '" + layer + "' has no parameter '" + layer + ".weight'");
}

void record_fused_pools(Model& model, PrecisionRun& run) {
  model.visit_layers([&run](Layer& l) {
    const auto* conv = dynamic_cast<const Conv2dLayer*>(&l);
    if (conv != nullptr && conv->fused_pool() != nullptr && conv->fused_pool()->last_pooled_by_previous_layer())
      run.pooled_by[conv->fused_pool()->name()] = conv->name();
  });
}

// The pooling's own time: what it took in the FP32 run, where it ran alone, less what its layer
// still took in this run.
void charge_fused_pools_to_layers(DeviceProfile& p, const std::vector<PrecisionRun>& runs) {
  const PrecisionRun* fp32 = nullptr;
  for (const PrecisionRun& run : runs)
    if (run.mode == LayerPrecision::FP32) fp32 = &run;
  for (const PrecisionRun& run : runs)
    for (const auto& [pool, conv] : run.pooled_by) {
      if (fp32 == nullptr || fp32->pooled_by.count(pool) != 0) continue;  // alone in no run to compare with
      const double alone = fp32->timer.center(pool + ".forward") - run.timer.center(pool + ".forward");
      double& forward = p.gemm_layers[conv][run.mode].forward_seconds;
      forward = std::max(0.0, forward - alone);
    }
}

void charge_int8_copies_to_layers(DeviceProfile& p, const ModelDesc& desc, const Model& model,
                                  const std::vector<PrecisionRun>& runs, SampleCenter center) {
  double base = -1;
  for (const PrecisionRun& run : runs)
    if (run.mode == LayerPrecision::FP32 && !run.optimizer_seconds.empty()) base = center_of(run.optimizer_seconds, center);
  if (base < 0) return;  // no FP32 run: the center of every run stands
  p.optimizer_seconds = base;
  for (const PrecisionRun& run : runs) {
    if (!run.made_int8_rows || run.optimizer_seconds.empty()) continue;
    const double extra = std::max(0.0, center_of(run.optimizer_seconds, center) - base);
    int64_t total = 0;
    for (const LayerDesc* l : model_gemm_layers(desc)) total += weight_numel(model, l->name);
    for (const LayerDesc* l : model_gemm_layers(desc))
      if (total > 0)
        p.gemm_layers[l->name][run.mode].forward_seconds += extra * double(weight_numel(model, l->name)) / double(total);
  }
}

}  // namespace qsync
