// File: worker/precision_ops.h
// The per-layer precision machinery of GEMM-like layers, as explicit ops (so they can be timed,
// profiled and costed by the planner), written once on the op interface (worker/ops/device_ops.h)
// and run on whatever device the rank computes on:
//   cast_activation  FP32 input -> the layer's forward operand (what is saved for backward)
//   cast_weight      FP32 master weight -> the forward weight operand (per-channel INT8 scales)
//   cast_gradient    FP32 output gradient -> the backward GEMMs' operand
//   backward_operand a saved forward operand -> the backward GEMMs' operand (INT8 -> 16 bit)
//   backward_weight  the weight operand of the backward GEMMs
// Per precision (planner/layer_precision.h):
//   fp32      no casts
//   tf32      no casts: the FP32 tensors are read as TF32 operands (tensor cores round them)
//   bf16/fp16 everything in the 16-bit format, FP32 accumulation
//   int8      x per tensor, w per output channel, RNE; backward in ctx.sixteen_bit from the INT8 copies
//   int8-all  int8, and the gradient is INT8 per tensor with stochastic rounding; the backward
//             weight operand is the master re-quantized per tensor
//   fp8       E4M3 x and w, E5M2 gradient, per-tensor scales (amax / max_finite)
// On devices whose INT8/FP8 GEMMs want both operands k-contiguous (cuBLASLt's TN), the gradient
// cast can also write its transpose with the same scale (one amax pass, no transpose later).
#pragma once

#include <string>

#include "kernels/device_class.h"
#include "planner/layer_precision.h"
#include "worker/layer.h"
#include "worker/tensor.h"

namespace qsync {

// Which side of the GEMM an INT8 tensor feeds. On CPUs without VNNI the A side is quantized to
// 7 bits (DeviceOps::int8_a_operand_max), B to the full [-127, 127].
enum class OperandRole : uint8_t { A, B };

Tensor cast_activation(const Tensor& x, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role);
Tensor cast_weight(const Tensor& w, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role);
// cast_weight of a layer's parameter in its forward: the per-row INT8 copy the optimizer step
// made ahead when there is one for this training step (Parameter::int8_rows, the same bits),
// else cast_weight of its value. A training forward also tells the optimizer what to make ahead
// for the next step (its INT8 range, or nothing for other precisions).
Tensor cast_parameter(Parameter& w, LayerPrecision p, StepContext& ctx, const std::string& layer, OperandRole role);
// The output gradient is the A operand of both backward GEMMs of Linear and of Conv2d's weight
// gradient; it is quantized as an A operand. transposed (optional): for INT8/FP8 gradients on a
// device that wants k-contiguous operands, also the (cols, rows) transpose of dy's 2-D view,
// same scale; left undefined otherwise. relu_mask (optional, dy's shape, uint8 0/1): dy is a
// fused ReLU's output gradient; the cast is of mask ? dy : +0, read on the fly where the op
// allows (INT8, the native 16-bit backward), else masked into a copy first. known_amax (>= 0):
// the amax of that gradient, found by the caller on the way (an INT8 cast then skips its pass).
Tensor cast_gradient(const Tensor& dy, LayerPrecision p, StepContext& ctx, const std::string& layer,
                     Tensor* transposed = nullptr, const Tensor* relu_mask = nullptr, float known_amax = -1.0f);
// Whether cast_gradient reads a ReLU mask on the fly for this precision (INT8 gradients, the
// native 16-bit backward of int8) rather than masking into a copy first.
bool cast_gradient_reads_relu_mask(LayerPrecision p, const StepContext& ctx);
// The 16-bit format (BF16 or FP16) when cast_gradient's result is a plain conversion of the
// (masked) gradient to it, the bits of convert(); FP32 when the cast is anything else (none,
// quantized, emulated 16-bit in FP32). A device may then convert in a pass of its own over dy.
Precision gradient_conversion(LayerPrecision p, const StepContext& ctx);
Tensor backward_operand(const Tensor& saved, LayerPrecision p, StepContext& ctx, const std::string& layer);
// backward_weight: the master weights as they are (fp32, tf32), the saved INT8 ones in 16 bit
// (int8), or re-quantized per tensor (int8-all; with the amax the optimizer found, where it made
// this step's INT8 rows: Parameter::int8_rows_amax).
Tensor backward_weight(const Tensor& saved_w, const Parameter& master, LayerPrecision p, StepContext& ctx,
                       const std::string& layer, OperandRole role);

// The device's 16-bit format for the backward GEMMs of int8 layers: BF16 where the class computes
// it natively, FP16 on CUDA, else FP16 numerics emulated in FP32 GEMMs (sixteen_bit_native false).
void set_sixteen_bit_for(const DeviceClass& c, StepContext& ctx);

}  // namespace qsync
