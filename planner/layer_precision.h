// File: planner/layer_precision.h
// The compute precisions a GEMM-like layer can be planned at (the values of a plan file), as
// data: what the forward GEMM, the backward GEMMs and the saved activations use. Storage bytes
// and ranges come from the kernels' precision table (kernels/precision.h).
//
//   fp32      FP32 everywhere (strict FP32 GEMMs: on GPUs the CUDA cores, no TF32)
//   tf32      FP32 tensors, GEMMs on TF32 tensor cores (10-bit mantissa products, FP32
//             accumulation), forward and backward; saved input FP32. GPUs of sm80+ only: CPU
//             classes refuse it at plan time (layer_precision_support)
//   bf16      BF16 forward and backward, saved input in BF16
//   fp16      FP16 forward and backward, saved input in FP16
//   int8      QSync's INT8: forward int8 x int8 -> int32 (per-tensor input scale, per-channel
//             weight scale), backward in 16 bit from the saved INT8 tensors
//   int8-all  int8 plus both backward GEMMs in INT8 (gradients quantized per tensor,
//             stochastic rounding)
//   fp8       E4M3 forward, E5M2 gradients, per-tensor scales
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "kernels/device_class.h"
#include "kernels/precision.h"

namespace qsync {

enum class LayerPrecision : uint8_t { FP32, TF32, BF16, FP16, INT8, INT8_ALL, FP8 };
inline constexpr int LAYER_PRECISION_COUNT = 7;

enum class BackwardKind : uint8_t {
  SAME_AS_FORWARD,  // backward GEMMs in the forward precision (fp32, bf16, fp16)
  SIXTEEN_BIT,      // the device's 16-bit format (bf16 where native, else fp16)
  INT8,             // int8 x int8 with per-tensor scales
  FP8_E5M2,         // gradients in E5M2, saved operands in E4M3
};

struct LayerPrecisionTraits {
  LayerPrecision mode;
  const char* name;            // the plan-file spelling
  Precision forward;           // operands of the forward GEMM
  BackwardKind backward;
  Precision saved_activation;  // storage of the saved layer input (what the memory plan counts)
  Precision saved_weight;      // storage of the weight copy the backward reads (FP32: the master)
  int aggressiveness;          // 0 = fp32 ... higher = more perturbation, for ordering
  // Whether the backward reads a low-precision copy of the weight rather than the FP32 master
  // (fp32 and tf32 read the master: no weight copy is held).
  bool weight_copy;
};

const std::array<LayerPrecisionTraits, LAYER_PRECISION_COUNT>& layer_precision_table();
const LayerPrecisionTraits& layer_precision_traits(LayerPrecision p);
inline const char* layer_precision_name(LayerPrecision p) { return layer_precision_traits(p).name; }
// Throws std::invalid_argument naming the known spellings.
LayerPrecision layer_precision_from_name(std::string_view name);
std::string layer_precision_names_joined();

// The GEMM operand precisions a layer precision computes in on a device class: the forward's,
// and the backward's (int8's 16-bit backward: BF16 where the class has it natively, else FP16).
struct LayerPrecisionGemms {
  Precision forward, backward_gradient, backward_operand;
};
LayerPrecisionGemms layer_precision_gemms(const DeviceClass& c, LayerPrecision p);

// Whether a device class runs a layer precision, and why not: GPU classes run what their tensor
// cores compute natively (never emulated on the host); classes CUDA 13 cannot compile for (V100,
// sm70) run nothing; CPU classes run everything but tf32 (a GPU tensor-core mode), emulating what
// they lack. `why` names the class, the precision and the fix.
struct LayerPrecisionSupport {
  bool ok = true;
  std::string why;
};
LayerPrecisionSupport layer_precision_support(const DeviceClass& c, LayerPrecision p);

}  // namespace qsync
