// File: kernels/cpu/conv_int8_output.h
// How the INT8 convolutions of conv_onednn.cpp turn oneDNN's FP32 sums into their outputs:
// out(c) = sums(c) * scale * channel_scale(c) + bias(c), one multiply and one add per value (the
// same bits in the vectorized and the scalar code), from NHWC sums into NCHW outputs or in place.
#pragma once

#include <cstdint>

namespace qsync {

// How an INT8 call's FP32 sums become its output: out(c) = sums(c) * scale * channel_scale(c) +
// bias(c) over `channels` planes of `hw` values, then with `relu` out = out > 0 ? out : 0 and,
// when relu_mask is set, mask = out > 0 (uint8 0/1, the output's shape). Below VNNI the sums are
// twice ours (doubled weights, conv_onednn.h) and the scale halves them (exact: a power of two).
// With `width` set (int8_nhwc_to_nchw_pooled) the planes are hw / width rows of `width` and a
// 2x2 / stride-2 max pooling follows in the same pass.
struct Int8Output {
  int64_t n, channels, hw;
  float scale;
  const float* channel_scales;  // (channels) or nullptr
  const float* bias;            // (channels) or nullptr
  bool relu = false;
  uint8_t* relu_mask = nullptr;  // (n, channels, hw) or nullptr
  int64_t width = 0;             // pooled: the planes' width
  int32_t* argmax = nullptr;     // pooled: (n, channels, rows / 2, width / 2) or nullptr
  float channel_scale(int64_t c) const { return scale * (channel_scales != nullptr ? channel_scales[c] : 1.0f); }
};

// out (N, C, H, W) from sums (N, H, W, C).
void int8_nhwc_to_nchw(const float* sums, const Int8Output& t, float* out);
// out (N, C, H / 2, W / 2) from sums (N, H, W, C), W = t.width: the outputs (the mask of every one
// of them written as int8_nhwc_to_nchw writes it) max-pooled over 2x2 windows at stride 2 without
// writing them, with each window's winning index in its (H, W) plane into t.argmax: the bits of
// int8_nhwc_to_nchw then a 2x2 max pooling (NaN wins, ties go to the first cell in row-major
// order, an odd last row or column is not pooled).
void int8_nhwc_to_nchw_pooled(const float* sums, const Int8Output& t, float* out);
// out (N, C, H, W) holding sums: the transform in place.
void int8_scale_in_place(const Int8Output& t, float* out);

}  // namespace qsync
