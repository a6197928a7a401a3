// File: planner/layer_precision.cpp
// The layer-precision table.
#include "planner/layer_precision.h"

#include <stdexcept>

namespace qsync {
namespace {

using P = Precision;
const std::array<LayerPrecisionTraits, LAYER_PRECISION_COUNT> TABLE = {{
    // mode                     name        forward      backward                     saved act    saved weight aggr
    {LayerPrecision::FP32,     "fp32",     P::FP32,     BackwardKind::SAME_AS_FORWARD, P::FP32,     P::FP32,     0},
    {LayerPrecision::BF16,     "bf16",     P::BF16,     BackwardKind::SAME_AS_FORWARD, P::BF16,     P::BF16,     2},
    {LayerPrecision::FP16,     "fp16",     P::FP16,     BackwardKind::SAME_AS_FORWARD, P::FP16,     P::FP16,     1},
    {LayerPrecision::INT8,     "int8",     P::INT8,     BackwardKind::SIXTEEN_BIT,     P::INT8,     P::INT8,     3},
    {LayerPrecision::INT8_ALL, "int8-all", P::INT8,     BackwardKind::INT8,            P::INT8,     P::INT8,     5},
    {LayerPrecision::FP8,      "fp8",      P::FP8_E4M3, BackwardKind::FP8_E5M2,        P::FP8_E4M3, P::FP8_E4M3, 4},
}};

}  // namespace

const std::array<LayerPrecisionTraits, LAYER_PRECISION_COUNT>& layer_precision_table() { return TABLE; }

const LayerPrecisionTraits& layer_precision_traits(LayerPrecision p) { return TABLE.at(size_t(p)); }

std::string layer_precision_names_joined() {
  std::string s;
  for (const auto& t : TABLE) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

LayerPrecision layer_precision_from_name(std::string_view name) {
  for (const auto& t : TABLE)
    if (name == t.name) return t.mode;
  throw std::invalid_argument("unknown layer precision '" + std::string(name) +
                              "'; known: " + layer_precision_names_joined());
}

}  // namespace qsync
