// File: planner/layer_precision.cpp
// The layer-precision table.
#include "planner/layer_precision.h"

#include <stdexcept>
#include <vector>

namespace qsync {
namespace {

using P = Precision;
const std::array<LayerPrecisionTraits, LAYER_PRECISION_COUNT> TABLE = {{
    // mode                     name        forward      backward                     saved act    saved weight aggr copy
    {LayerPrecision::FP32,     "fp32",     P::FP32,     BackwardKind::SAME_AS_FORWARD, P::FP32,     P::FP32,     0, false},
    {LayerPrecision::TF32,     "tf32",     P::TF32,     BackwardKind::SAME_AS_FORWARD, P::TF32,     P::TF32,     1, false},
    {LayerPrecision::BF16,     "bf16",     P::BF16,     BackwardKind::SAME_AS_FORWARD, P::BF16,     P::BF16,     3, true},
    {LayerPrecision::FP16,     "fp16",     P::FP16,     BackwardKind::SAME_AS_FORWARD, P::FP16,     P::FP16,     2, true},
    {LayerPrecision::INT8,     "int8",     P::INT8,     BackwardKind::SIXTEEN_BIT,     P::INT8,     P::INT8,     4, true},
    {LayerPrecision::INT8_ALL, "int8-all", P::INT8,     BackwardKind::INT8,            P::INT8,     P::INT8,     6, true},
    {LayerPrecision::FP8,      "fp8",      P::FP8_E4M3, BackwardKind::FP8_E5M2,        P::FP8_E4M3, P::FP8_E4M3, 5, true},
}};

}  // namespace

const std::array<LayerPrecisionTraits, LAYER_PRECISION_COUNT>& layer_precision_table() { return TABLE; }

const LayerPrecisionTraits& layer_precision_traits(LayerPrecision p) { return TABLE.at(size_t(p)); }

std::string layer_precision_names_joined() {
  std::string s;
  for (const auto& t : TABLE) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

LayerPrecisionGemms layer_precision_gemms(const DeviceClass& c, LayerPrecision p) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  // GPU classes: BF16 from its tensor cores on (the precision table); CPU classes: the ISA caps
  // with native BF16 dot products (the worker asks oneDNN: worker/precision_ops.h).
  const bool bf16 = c.kind == DeviceKind::CUDA ? c.cuda_sm >= precision_traits(Precision::BF16).cuda_native_sm
                                               : c.cpu_isa_cap >= CpuIsa::AVX512_BF16;
  const Precision sixteen = bf16 ? Precision::BF16 : Precision::FP16;
  switch (t.backward) {
    case BackwardKind::SAME_AS_FORWARD: return {t.forward, t.forward, t.forward};
    case BackwardKind::SIXTEEN_BIT: return {t.forward, sixteen, sixteen};
    case BackwardKind::INT8: return {t.forward, Precision::INT8, Precision::INT8};
    case BackwardKind::FP8_E5M2: return {t.forward, Precision::FP8_E5M2, t.forward};
  }
  return {t.forward, t.forward, t.forward};
}

LayerPrecisionSupport layer_precision_support(const DeviceClass& c, LayerPrecision p) {
  const LayerPrecisionTraits& t = layer_precision_traits(p);
  if (c.kind == DeviceKind::CPU) {
    if (p == LayerPrecision::TF32)
      return {false, "layer precision tf32 runs on TF32 tensor cores of GPUs (sm80+); " + c.name +
                         " has none: plan fp32 (or bf16) for its layers"};
    return {};
  }
  if (c.cuda_sm < CUDA_MIN_SM)
    return {false, c.name + " (sm" + std::to_string(c.cuda_sm) + "): CUDA 13 cannot compile for it (sm" +
                       std::to_string(CUDA_MIN_SM) + "+ only), so it runs no layer precision, " + t.name +
                       " included: leave these GPUs out of the job or build with CUDA 12"};
  const LayerPrecisionGemms g = layer_precision_gemms(c, p);
  for (Precision q : {g.forward, g.backward_gradient, g.backward_operand}) {
    const int need = precision_traits(q).cuda_native_sm;
    if (c.cuda_sm < need)
      return {false, std::string("layer precision ") + t.name + " needs " + precision_name(q) + " GEMMs (sm" +
                         std::to_string(need) + "+ tensor cores); " + c.name + " is sm" + std::to_string(c.cuda_sm) +
                         ": plan another precision for its layers"};
  }
  return {};
}

LayerPrecision layer_precision_from_name(std::string_view name) {
  for (const auto& t : TABLE)
    if (name == t.name) return t.mode;
  throw std::invalid_argument("unknown layer precision '" + std::string(name) +
                              "'; known: " + layer_precision_names_joined());
}

}  // namespace qsync
