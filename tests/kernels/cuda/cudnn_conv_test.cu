// File: tests/kernels/cuda/cudnn_conv_test.cu
// The cuDNN convolution engine against a plain-loop convolution (the `_ref`), forward, backward
// data and backward filter, over awkward geometries (odd sizes, stride 2, padding, 1x1), in
// strict FP32, TF32 (where the GPU has it) and BF16 / FP16; beta 1 accumulates; plans are cached;
// repeated runs are bitwise equal (only deterministic engines are chosen). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/float_convert.h"

namespace qsync {
namespace {

#define REQUIRE_CUDA_DEVICE() \
  if (qsync::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

CudnnConvShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t kernel, int64_t stride, int64_t pad) {
  return {n, c, h, w, k, kernel, stride, pad, (h + 2 * pad - kernel) / stride + 1, (w + 2 * pad - kernel) / stride + 1};
}

// The plain cross-correlation and its two gradients, in double.
struct RefConv {
  CudnnConvShape s;
  double x(const std::vector<float>& v, int64_t n, int64_t c, int64_t y, int64_t xx) const {
    if (y < 0 || y >= s.h || xx < 0 || xx >= s.w) return 0.0;
    return v[size_t(((n * s.c + c) * s.h + y) * s.w + xx)];
  }
  std::vector<double> forward(const std::vector<float>& in, const std::vector<float>& w) const {
    std::vector<double> y(size_t(s.n * s.k * s.oh * s.ow), 0.0);
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t k = 0; k < s.k; ++k)
        for (int64_t oy = 0; oy < s.oh; ++oy)
          for (int64_t ox = 0; ox < s.ow; ++ox) {
            double acc = 0;
            for (int64_t c = 0; c < s.c; ++c)
              for (int64_t r = 0; r < s.kernel; ++r)
                for (int64_t q = 0; q < s.kernel; ++q)
                  acc += x(in, n, c, oy * s.stride - s.pad + r, ox * s.stride - s.pad + q) *
                         w[size_t(((k * s.c + c) * s.kernel + r) * s.kernel + q)];
            y[size_t(((n * s.k + k) * s.oh + oy) * s.ow + ox)] = acc;
          }
    return y;
  }
  // dx = conv^T(dy, w), dw = sum dy x
  void backward(const std::vector<float>& in, const std::vector<float>& w, const std::vector<float>& dy,
                std::vector<double>& dx, std::vector<double>& dw) const {
    dx.assign(size_t(s.n * s.c * s.h * s.w), 0.0);
    dw.assign(size_t(s.k * s.c * s.kernel * s.kernel), 0.0);
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t k = 0; k < s.k; ++k)
        for (int64_t oy = 0; oy < s.oh; ++oy)
          for (int64_t ox = 0; ox < s.ow; ++ox) {
            const double g = dy[size_t(((n * s.k + k) * s.oh + oy) * s.ow + ox)];
            for (int64_t c = 0; c < s.c; ++c)
              for (int64_t r = 0; r < s.kernel; ++r)
                for (int64_t q = 0; q < s.kernel; ++q) {
                  const int64_t y = oy * s.stride - s.pad + r, xx = ox * s.stride - s.pad + q;
                  if (y < 0 || y >= s.h || xx < 0 || xx >= s.w) continue;
                  const size_t wi = size_t(((k * s.c + c) * s.kernel + r) * s.kernel + q);
                  dx[size_t(((n * s.c + c) * s.h + y) * s.w + xx)] += g * w[wi];
                  dw[wi] += g * x(in, n, c, y, xx);
                }
          }
  }
};

// ||a - b|| / ||b||.
double relative(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / (n > 0 ? n : 1));
}

std::vector<uint16_t> to_sixteen(const std::vector<float>& v, Precision p) {
  std::vector<uint16_t> out(v.size());
  if (p == Precision::BF16) convert_fp32_to_bf16(v.data(), out.data(), int64_t(v.size()));
  else convert_fp32_to_fp16(v.data(), out.data(), int64_t(v.size()));
  return out;
}
std::vector<float> from_sixteen(const std::vector<uint16_t>& v, Precision p) {
  std::vector<float> out(v.size());
  if (p == Precision::BF16) convert_bf16_to_fp32(v.data(), out.data(), int64_t(v.size()));
  else convert_fp16_to_fp32(v.data(), out.data(), int64_t(v.size()));
  return out;
}

const CudnnConvShape GEOMETRIES[] = {shape(3, 5, 11, 9, 7, 3, 1, 1), shape(2, 4, 13, 13, 8, 3, 2, 1),
                                     shape(4, 16, 7, 7, 12, 1, 1, 0), shape(1, 1, 28, 28, 32, 3, 1, 1),
                                     shape(2, 8, 10, 10, 8, 5, 2, 2)};

// Relative errors against the double reference, per type: FP32 (accumulation only) 1e-5;
// TF32 inputs rounded to 10 mantissa bits (0.03%, two operands) 2e-3; FP16 likewise plus the
// FP16 output (0.03%) 2e-3; BF16 (7 bits: 0.24% two operands, 0.17% the output) 1e-2.
double bound(Precision p, bool tf32) {
  if (p == Precision::FP32) return tf32 ? 2e-3 : 1e-5;
  return p == Precision::FP16 ? 2e-3 : 1e-2;
}

void check_geometry(const CudnnConvShape& s, Precision type, bool tf32, uint32_t seed) {
  const auto x = normal(size_t(s.n * s.c * s.h * s.w), seed), w = normal(size_t(s.k * s.c * s.kernel * s.kernel), seed + 1);
  const auto dy = normal(size_t(s.n * s.k * s.oh * s.ow), seed + 2);
  const RefConv ref{s};
  const auto y_ref = ref.forward(x, w);
  std::vector<double> dx_ref, dw_ref;
  ref.backward(x, w, dy, dx_ref, dw_ref);
  const bool sixteen = type != Precision::FP32;
  auto up = [&](const std::vector<float>& v) {
    return sixteen ? CudaBuffer::from_vector(to_sixteen(v, type)) : CudaBuffer::from_vector(v);
  };
  auto down = [&](const CudaBuffer& b, size_t n) {
    return sixteen ? from_sixteen(b.download_vector<uint16_t>(n), type) : b.download_vector<float>(n);
  };
  CudaBuffer dxb = up(x), dwb = up(w), ddy = up(dy);
  const size_t elem = sixteen ? 2 : 4;
  CudaBuffer y(dy.size() * elem), dx(x.size() * elem), dw(w.size() * elem);
  CudnnConvEngine engine(nullptr);
  CudnnConvCall call;
  call.shape = s;
  call.type = type;
  call.allow_tf32 = tf32;
  call.op = CudnnConvOp::FORWARD;
  call.x = dxb.data();
  call.w = dwb.data();
  call.out = y.data();
  engine.run(call);
  call.op = CudnnConvOp::BACKWARD_DATA;
  call.dy = ddy.data();
  call.out = dx.data();
  engine.run(call);
  call.op = CudnnConvOp::BACKWARD_FILTER;
  call.out = dw.data();
  engine.run(call);
  QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LE(relative(down(y, dy.size()), y_ref), bound(type, tf32)) << "forward";
  EXPECT_LE(relative(down(dx, x.size()), dx_ref), bound(type, tf32)) << "backward data";
  EXPECT_LE(relative(down(dw, w.size()), dw_ref), bound(type, tf32)) << "backward filter";
  EXPECT_EQ(engine.cached_plans(), 3u);
}

TEST(CudnnConv, MatchesThePlainLoopsInEveryType) {
  REQUIRE_CUDA_DEVICE();
  const int sm = cuda_device_sm(cuda_current_device());
  uint32_t seed = 1;
  for (const CudnnConvShape& s : GEOMETRIES) {
    SCOPED_TRACE("N " + std::to_string(s.n) + " C " + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
                 std::to_string(s.w) + " K " + std::to_string(s.k) + " kernel " + std::to_string(s.kernel) +
                 " stride " + std::to_string(s.stride) + " pad " + std::to_string(s.pad));
    check_geometry(s, Precision::FP32, false, seed += 10);
    check_geometry(s, Precision::FP16, false, seed += 10);
    if (sm >= 80) {
      check_geometry(s, Precision::FP32, true, seed += 10);
      check_geometry(s, Precision::BF16, false, seed += 10);
    }
  }
}

TEST(CudnnConv, BetaOneAccumulatesAndRunsRepeatBitForBit) {
  REQUIRE_CUDA_DEVICE();
  const CudnnConvShape s = GEOMETRIES[1];
  const auto x = normal(size_t(s.n * s.c * s.h * s.w), 3), dy = normal(size_t(s.n * s.k * s.oh * s.ow), 4);
  const std::vector<float> dw0(size_t(s.k * s.c * s.kernel * s.kernel), 1.0f);
  CudaBuffer dx = CudaBuffer::from_vector(x), ddy = CudaBuffer::from_vector(dy);
  CudnnConvEngine engine(nullptr);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    CudaBuffer dw = CudaBuffer::from_vector(dw0);
    CudnnConvCall call;
    call.op = CudnnConvOp::BACKWARD_FILTER;
    call.shape = s;
    call.x = dx.data();
    call.dy = ddy.data();
    call.out = dw.data();
    call.beta = 1.0f;
    engine.run(call);
    QSYNC_CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = dw.download_vector<float>(dw0.size());
    if (run == 0) {
      first = got;
      std::vector<double> dx_ref, dw_ref;
      RefConv{s}.backward(x, std::vector<float>(dw0.size(), 0.0f), dy, dx_ref, dw_ref);
      for (double& v : dw_ref) v += 1.0;  // beta 1 on a gradient of ones
      EXPECT_LE(relative(got, dw_ref), 1e-5);
    } else {
      EXPECT_EQ(got, first) << "a deterministic engine gives the same bits twice";
    }
  }
}

}  // namespace
}  // namespace qsync
