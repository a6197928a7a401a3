// File: kernels/cpu/conv_int8_input.h
// How the INT8 convolutions of conv_onednn.cpp hand their 8-bit inputs (x for the forward, dy for
// the input gradient) to oneDNN's kernels, which read them NHWC: each sample's (C, H*W) planes
// transposed into (H*W, C), in place of oneDNN's reorder (jit:uni, about 4 GB/s on Zen 5, 3 ms of
// the zoo CNN's int8-all step on cpu-avx2). A byte permutation: every path gives the same bytes.
#pragma once

#include <cstdint>

namespace qsync {

// dst (N, H*W, C) from src (N, C, H*W), `hw` = H*W; the two must not overlap. Vectorized from
// the AVX2 class up (16 x 32 byte tiles), else int8_nchw_to_nhwc_ref.
void int8_nchw_to_nhwc(const int8_t* src, int64_t n, int64_t c, int64_t hw, int8_t* dst);
// The plain loops: the oracle of the tests and the fallback.
void int8_nchw_to_nhwc_ref(const int8_t* src, int64_t n, int64_t c, int64_t hw, int8_t* dst);

}  // namespace qsync
