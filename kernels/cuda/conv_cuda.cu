// File: kernels/cuda/conv_cuda.cu
// im2col, col2im and the NCHW / channel-major moves of Conv2d (see conv_cuda.h).
#include "kernels/cuda/conv_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::launch_elementwise;

template <typename T>
struct Im2col {
  const T* x; T* cols; int64_t s0, samples; Conv2dShape g; bool positions_major;
  __device__ void operator()(int64_t i) const {
    const int64_t hw = g.oh * g.ow, n = samples * hw, taps = g.c * g.k * g.k;
    int64_t tap, pos;
    if (positions_major) {
      pos = i / taps;
      tap = i % taps;
    } else {
      tap = i / n;
      pos = i % n;
    }
    const int64_t s = pos / hw, oy = (pos % hw) / g.ow, ox = pos % g.ow;
    const int64_t ci = tap / (g.k * g.k), ky = (tap / g.k) % g.k, kx = tap % g.k;
    const int64_t yy = oy * g.stride - g.pad + ky, xx = ox * g.stride - g.pad + kx;
    const bool inside = yy >= 0 && yy < g.h && xx >= 0 && xx < g.w;
    cols[i] = inside ? x[(((s0 + s) * g.c + ci) * g.h + yy) * g.w + xx] : T(0);
  }
};

// One thread per input element (s, ci, y, x): adds, in (ky, kx) order, the column entries of the
// output positions that read it.
struct Col2im {
  const float* dcols; float* dx; int64_t s0, samples; Conv2dShape g;
  __device__ void operator()(int64_t i) const {
    const int64_t x = i % g.w, y = (i / g.w) % g.h, ci = (i / (g.w * g.h)) % g.c, s = i / (g.w * g.h * g.c);
    const int64_t hw = g.oh * g.ow, n = samples * hw;
    float* out = dx + (((s0 + s) * g.c + ci) * g.h + y) * g.w + x;
    float acc = *out;
    for (int64_t ky = 0; ky < g.k; ++ky) {
      const int64_t ty = y + g.pad - ky;  // = oy * stride
      if (ty < 0 || ty % g.stride != 0 || ty / g.stride >= g.oh) continue;
      const int64_t oy = ty / g.stride;
      for (int64_t kx = 0; kx < g.k; ++kx) {
        const int64_t tx = x + g.pad - kx;
        if (tx < 0 || tx % g.stride != 0 || tx / g.stride >= g.ow) continue;
        const int64_t ox = tx / g.stride, tap = (ci * g.k + ky) * g.k + kx;
        acc = __fadd_rn(acc, dcols[tap * n + s * hw + oy * g.ow + ox]);
      }
    }
    *out = acc;
  }
};

struct ChannelMajorToNchw {
  const float* y_cm; const float* bias; float* y; int64_t samples, o, hw;
  __device__ void operator()(int64_t i) const {  // i over (s, oc, p)
    const int64_t p = i % hw, oc = (i / hw) % o, s = i / (hw * o);
    const float v = y_cm[oc * samples * hw + s * hw + p];
    y[i] = bias != nullptr ? __fadd_rn(v, bias[oc]) : v;
  }
};
struct ChannelBias {
  float* y; const float* bias; int64_t o, hw;
  __device__ void operator()(int64_t i) const { y[i] = __fadd_rn(y[i], bias[(i / hw) % o]); }
};
struct NchwToChannelMajor {
  const float* dy; float* dy_cm; int64_t samples, o, hw;
  __device__ void operator()(int64_t i) const {  // i over (oc, s, p)
    const int64_t p = i % hw, s = (i / hw) % samples, oc = i / (hw * samples);
    dy_cm[i] = dy[(s * o + oc) * hw + p];
  }
};
struct PlaneSums {  // partial[s, oc] = sum_p dy[s, oc, p]: eight lane sums (lane j: p = j, j + 8, ...), added pairwise
  const float* dy; float* partial; int64_t hw;
  __device__ void operator()(int64_t i) const {
    const float* row = dy + i * hw;
    float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int64_t p = 0;
    for (; p + 8 <= hw; p += 8)
      for (int j = 0; j < 8; ++j) lane[j] = __fadd_rn(lane[j], row[p + j]);
    for (int j = 0; p < hw; ++p, ++j) lane[j] = __fadd_rn(lane[j], row[p]);
    partial[i] = __fadd_rn(__fadd_rn(__fadd_rn(lane[0], lane[4]), __fadd_rn(lane[1], lane[5])),
                           __fadd_rn(__fadd_rn(lane[2], lane[6]), __fadd_rn(lane[3], lane[7])));
  }
};
struct SampleSumsInto {  // db[oc] += partial[s, oc], s in order
  const float* partial; float* db; int64_t batch, o;
  __device__ void operator()(int64_t oc) const {
    float acc = db[oc];
    for (int64_t s = 0; s < batch; ++s) acc = __fadd_rn(acc, partial[s * o + oc]);
    db[oc] = acc;
  }
};

}  // namespace

void im2col_cuda(const void* x, int elem, int64_t s0, int64_t samples, const Conv2dShape& g, bool positions_major,
                 void* cols, void* stream) {
  const int64_t total = samples * g.oh * g.ow * g.c * g.k * g.k;
  switch (elem) {
    case 1:
      return launch_elementwise(Im2col<uint8_t>{static_cast<const uint8_t*>(x), static_cast<uint8_t*>(cols), s0, samples,
                                                g, positions_major}, total, stream);
    case 2:
      return launch_elementwise(Im2col<uint16_t>{static_cast<const uint16_t*>(x), static_cast<uint16_t*>(cols), s0,
                                                 samples, g, positions_major}, total, stream);
    case 4:
      return launch_elementwise(Im2col<uint32_t>{static_cast<const uint32_t*>(x), static_cast<uint32_t*>(cols), s0,
                                                 samples, g, positions_major}, total, stream);
    default: throw std::invalid_argument("im2col_cuda: unsupported element size " + std::to_string(elem));
  }
}

void col2im_cuda(const float* dcols, int64_t s0, int64_t samples, const Conv2dShape& g, float* dx, void* stream) {
  launch_elementwise(Col2im{dcols, dx, s0, samples, g}, samples * g.c * g.h * g.w, stream);
}

void channel_major_to_nchw_cuda(const float* y_cm, const float* bias, float* y, int64_t samples, int64_t o,
                                int64_t hw, void* stream) {
  launch_elementwise(ChannelMajorToNchw{y_cm, bias, y, samples, o, hw}, samples * o * hw, stream);
}

void conv_bias_add_cuda(float* y, const float* bias, int64_t batch, int64_t o, int64_t hw, void* stream) {
  launch_elementwise(ChannelBias{y, bias, o, hw}, batch * o * hw, stream);
}

void nchw_to_channel_major_cuda(const float* dy, float* dy_cm, int64_t samples, int64_t o, int64_t hw, void* stream) {
  launch_elementwise(NchwToChannelMajor{dy, dy_cm, samples, o, hw}, samples * o * hw, stream);
}

void conv_bias_grad_cuda(const float* dy, float* db, int64_t batch, int64_t o, int64_t hw, float* partial,
                         void* stream) {
  launch_elementwise(PlaneSums{dy, partial, hw}, batch * o, stream);
  launch_elementwise(SampleSumsInto{partial, db, batch, o}, o, stream);
}

}  // namespace qsync
