// File: kernels/cuda/pool_cuda.cu
// Max and average pooling (see pool_cuda.h).
#include "kernels/cuda/pool_cuda.h"

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::launch_elementwise;

struct MaxForward {
  const float* x; float* y; int32_t* argmax; Pool2dShape g;
  __device__ void operator()(int64_t i) const {  // i over (b, c, oh, ow)
    const int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    const float* p = x + plane * g.h * g.w;
    float best = -INFINITY;
    int64_t best_index = -1;
    for (int64_t kh = 0; kh < g.kernel; ++kh) {
      const int64_t h = oh * g.stride - g.pad + kh;
      if (h < 0 || h >= g.h) continue;
      for (int64_t kw = 0; kw < g.kernel; ++kw) {
        const int64_t w = ow * g.stride - g.pad + kw;
        if (w < 0 || w >= g.w) continue;
        const float v = p[h * g.w + w];
        if (best_index < 0 || v > best || (v != v && best == best)) {
          best = v;
          best_index = h * g.w + w;
        }
      }
    }
    y[i] = best;
    if (argmax != nullptr) argmax[i] = int32_t(best_index);
  }
};

// One thread per input element: the outputs whose window holds it, in output order.
struct MaxBackward {
  const float* dy; const int32_t* argmax; float* dx; Pool2dShape g;
  __device__ void operator()(int64_t i) const {  // i over (b, c, h, w)
    const int64_t w = i % g.w, h = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const int64_t self = h * g.w + w;
    // Outputs oh with oh * stride - pad <= h < oh * stride - pad + kernel.
    const int64_t oh_lo = max(int64_t(0), (h + g.pad - g.kernel + g.stride) / g.stride);
    const int64_t oh_hi = min(g.oh - 1, (h + g.pad) / g.stride);
    const int64_t ow_lo = max(int64_t(0), (w + g.pad - g.kernel + g.stride) / g.stride);
    const int64_t ow_hi = min(g.ow - 1, (w + g.pad) / g.stride);
    float acc = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t o = (plane * g.oh + oh) * g.ow + ow;
        if (argmax[o] == self) acc = __fadd_rn(acc, dy[o]);
      }
    dx[i] = acc;
  }
};

struct AvgForward {
  const float* x; float* y; int64_t channels, positions; bool tokens;
  __device__ void operator()(int64_t i) const {  // i over (b, c)
    const int64_t b = i / channels, c = i % channels;
    const float* xb = x + b * channels * positions;
    const float inv = __fdiv_rn(1.0f, float(positions));
    float s = 0.0f;
    for (int64_t p = 0; p < positions; ++p) s = __fadd_rn(s, tokens ? xb[p * channels + c] : xb[c * positions + p]);
    y[i] = __fmul_rn(s, inv);
  }
};
struct AvgBackward {
  const float* dy; float* dx; int64_t channels, positions; bool tokens;
  __device__ void operator()(int64_t i) const {  // i over dx (b, ...)
    const int64_t per_sample = channels * positions, b = i / per_sample, r = i % per_sample;
    const int64_t c = tokens ? r % channels : r / positions;
    dx[i] = __fmul_rn(dy[b * channels + c], __fdiv_rn(1.0f, float(positions)));
  }
};

}  // namespace

void maxpool_forward_cuda(const float* x, float* y, int32_t* argmax, int64_t batch, const Pool2dShape& g, void* stream) {
  launch_elementwise(MaxForward{x, y, argmax, g}, batch * g.c * g.oh * g.ow, stream);
}

void maxpool_backward_cuda(const float* dy, const int32_t* argmax, float* dx, int64_t batch, const Pool2dShape& g,
                           void* stream) {
  launch_elementwise(MaxBackward{dy, argmax, dx, g}, batch * g.c * g.h * g.w, stream);
}

void avgpool_forward_cuda(const float* x, float* y, int64_t batch, int64_t channels, int64_t positions, bool tokens,
                          void* stream) {
  launch_elementwise(AvgForward{x, y, channels, positions, tokens}, batch * channels, stream);
}

void avgpool_backward_cuda(const float* dy, float* dx, int64_t batch, int64_t channels, int64_t positions, bool tokens,
                           void* stream) {
  launch_elementwise(AvgBackward{dy, dx, channels, positions, tokens}, batch * channels * positions, stream);
}

}  // namespace qsync
