// File: kernels/cpu/conv_onednn.h
// Convolutions on oneDNN's convolution primitives (direct JIT kernels in blocked layouts) for the
// host engine: forward in FP32, BF16 (where the ISA has BF16 dot products) and INT8 (s8 x s8 with
// per-tensor x and per-output-channel w scales); backward data in FP32, BF16 and INT8 (s8 dy x s8
// w, both per tensor: oneDNN's INT8 deconvolution, which is the backward data of a convolution);
// backward weights in FP32 and BF16. Tensors are NCHW and OIHW (packed) in the caller's memory;
// oneDNN's blocked copies live in per-thread buffers that grow to the largest call and are reused.
// INT8 sums come out of oneDNN as FP32 (exact below 2^24) and are then scaled, as the GEMM
// backend's output scales do.
// INT8 without VNNI (cpu-avx2, cpu-sse41): oneDNN multiplies u8 x s8 pairs into saturating int16
// (vpmaddubsw) and, to stay clear of saturation, halves the weights when it reorders them, which
// is exact only for even weights. So there the weights must be 7-bit (|w| <= 63, as the A operands
// of the GEMM backend are: cpu_int8_activation_max): they are handed over doubled, oneDNN halves
// them back exactly and its sums are twice ours, halved with the scales. A wider weight is refused
// (std::invalid_argument) before any work.
// One primitive per distinct call, cached. The reference (and fallback) is the im2col + GEMM
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
  // BF16, or INT8 (FORWARD and BACKWARD_DATA). Outputs (y, dx, dw) are FP32.
  Precision type = Precision::FP32;
  // FORWARD: x, w (+ bias) -> out = y.  BACKWARD_DATA: w, dy -> out = dx (written).
  // BACKWARD_WEIGHTS: x, dy -> out = dw (+=: added to what is there).
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;
  const float* bias = nullptr;  // FORWARD: (O) FP32 or nullptr
  float x_scale = 1.0f;             // INT8 FORWARD: x = x_scale * q
  const float* w_scales = nullptr;  // INT8: FORWARD (O) per output channel; BACKWARD_DATA (1) per tensor
  float dy_scale = 1.0f;            // INT8 BACKWARD_DATA: dy = dy_scale * q
  float* out = nullptr;
  // FORWARD: a ReLU after the bias, out = out > 0 ? out : 0 (NaN and -0 to +0): oneDNN's relu
  // post-op (a max with zero) in FP32 and BF16, the output transform in INT8; and its mask
  // (N, O, OH, OW), 1 where out > 0, else 0, when relu_mask is set.
  bool relu = false;
  uint8_t* relu_mask = nullptr;
  // INT8 FORWARD (conv_onednn_pools): a 2x2 / stride-2 max pooling of the outputs in the same pass,
  // which are not written: out is the pooled (N, O, OH / 2, OW / 2), pool_argmax (the same shape,
  // or nullptr) each window's winning index in its (OH, OW) plane; relu_mask stays (N, O, OH, OW).
  bool pool = false;
  int32_t* pool_argmax = nullptr;
};

// Whether oneDNN runs this call (shape, op, type) with a JIT kernel under the active ISA cap
// (not its reference kernel, and within the exactness rules above).
bool conv_onednn_supports(const ConvOnednnCall& call);
// Whether it runs the call (an INT8 FORWARD) with `pool` set: with oneDNN's sums in NHWC, which
// the output pass reads position by position, and an output of at least 2 x 2.
bool conv_onednn_pools(const ConvOnednnCall& call);
// Runs it; throws std::logic_error when conv_onednn_supports(call) is false (or, with `pool`,
// conv_onednn_pools).
void conv_onednn_run(const ConvOnednnCall& call);
// Both backward convolutions of one dy (BACKWARD_DATA and BACKWARD_WEIGHTS, same dy pointer):
// dy is reordered into oneDNN's layout once when both want the same one.
void conv_onednn_run_backward(const ConvOnednnCall& data, const ConvOnednnCall& weights);
// The oneDNN implementation of a call, e.g. "jit:avx512_core", or "" when none is taken.
std::string conv_onednn_impl(const ConvOnednnCall& call);

}  // namespace qsync
