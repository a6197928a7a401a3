// File: kernels/cpu/conv_onednn.h
// Convolutions on oneDNN's convolution primitives (direct JIT kernels in blocked layouts) for the
// host engine: forward in FP32, BF16 (where the ISA has BF16 dot products) and INT8 (s8 x s8 with
// per-tensor x and per-output-channel w scales, where the ISA has VNNI: without it oneDNN halves
// the weights to dodge vpmaddubsw saturation, which is not exact), backward data and backward
// weights in FP32 and BF16. Tensors are NCHW and OIHW (packed) in the caller's memory; oneDNN's
// blocked copies live in per-thread buffers that grow to the largest call and are reused.
// INT8 sums come out of oneDNN as FP32 (exact below 2^24) and are then scaled, as the GEMM
// backend's output scales do. One primitive per distinct call, cached. The reference (and fallback) is the im2col + GEMM
// path of worker/ops/cpu/cpu_conv.cpp; conv_onednn_supports says which calls run here.
//
//   ConvOnednnCall c{ConvOnednnOp::FORWARD, shape, Precision::FP32};
//   c.x = x; c.w = w; c.bias = b; c.out = y;
//   if (conv_onednn_supports(c)) conv_onednn_run(c);
#pragma once

#include <cstdint>
#include <string>

#include "kernels/precision.h"

namespace qsync {

enum class ConvOnednnOp : uint8_t { FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS };

struct ConvOnednnShape {
  int64_t n, c, h, w;  // input (N, C, H, W)
  int64_t o;           // output channels (weights O, C, k, k)
  int64_t kernel, stride, pad;
  int64_t oh, ow;      // output (N, O, OH, OW)
};

struct ConvOnednnCall {
  ConvOnednnOp op = ConvOnednnOp::FORWARD;
  ConvOnednnShape shape{};
  // Of x and w (FORWARD), of w and dy (BACKWARD_DATA), of x and dy (BACKWARD_WEIGHTS): FP32,
  // BF16, or INT8 (FORWARD only). Outputs (y, dx, dw) are FP32.
  Precision type = Precision::FP32;
  // FORWARD: x, w (+ bias) -> out = y.  BACKWARD_DATA: w, dy -> out = dx (written).
  // BACKWARD_WEIGHTS: x, dy -> out = dw (+=: added to what is there).
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;
  const float* bias = nullptr;  // FORWARD: (O) FP32 or nullptr
  float x_scale = 1.0f;             // INT8: x = x_scale * q
  const float* w_scales = nullptr;  // INT8: (O) per output channel
  float* out = nullptr;
};

// Whether oneDNN runs this call (shape, op, type) with a JIT kernel under the active ISA cap
// (not its reference kernel, and within the exactness rules above).
bool conv_onednn_supports(const ConvOnednnCall& call);
// Runs it; throws std::logic_error when conv_onednn_supports(call) is false.
void conv_onednn_run(const ConvOnednnCall& call);
// Both backward convolutions of one dy (BACKWARD_DATA and BACKWARD_WEIGHTS, same dy pointer):
// dy is reordered into oneDNN's layout once when both want the same one.
void conv_onednn_run_backward(const ConvOnednnCall& data, const ConvOnednnCall& weights);
// The oneDNN implementation of a call, e.g. "jit:avx512_core", or "" when none is taken.
std::string conv_onednn_impl(const ConvOnednnCall& call);

}  // namespace qsync
