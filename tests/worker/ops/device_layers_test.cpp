// File: tests/worker/ops/device_layers_test.cpp
// The GEMM layers on a GPU, every layer precision, against the same layer in FP32 on the CPU
// (same weights, same input and output gradient): the largest relative errors of y, dx and dW
// must stay within the CPU tests' bounds for that precision (tests/worker/layers/
// gemm_test_support.h, derived there), and fp32 on the GPU must agree with the CPU to FP32
// rounding. Prints one "[ gpu-vs-cpu ]" line per layer and precision: the table the GPU check
// script (scripts/gpu-check.sh) reports. Then whole steps of a zoo model on both devices.
// Needs a GPU: every test skips without one.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "tests/worker/layers/gemm_test_support.h"
#include "worker/layers/attention.h"
#include "worker/layers/conv2d.h"
#include "worker/layers/linear.h"
#include "worker/ops/cuda/cuda_ops.h"
#include "worker/precision_ops.h"

namespace qsync::testing {
namespace {

CudaOps* gpu() {
  static CudaOps* ops = cuda_device_count() > 0 ? new CudaOps(0) : nullptr;  // never destroyed (CUDA at exit)
  return ops;
}
#define REQUIRE_GPU() \
  if (gpu() == nullptr) GTEST_SKIP() << "no CUDA device"

Tensor to_gpu(const Tensor& h) {
  Tensor d = gpu()->empty(h.shape(), h.precision(), nullptr, "test");
  tensor_copy_from_host(h, d);
  return d;
}

// The layer's parameters moved to the GPU (values and zeroed gradients).
void place_on_gpu(Layer& layer) {
  for (Parameter* p : parameters_of(layer)) {
    p->value = to_gpu(p->value);
    p->grad = to_gpu(Tensor::zeros(p->grad.shape(), Precision::FP32, nullptr));
  }
}

StepResult step_on(Layer& layer, LayerPrecision p, const Tensor& x, const Tensor& dy, StepContext ctx, bool on_gpu) {
  set_layer_precision(layer, p);
  for (Parameter* q : parameters_of(layer)) ops_of(ctx).fill_zero(q->grad);
  StepResult r;
  const Tensor xi = on_gpu ? to_gpu(x) : x, dyi = on_gpu ? to_gpu(dy) : dy;
  r.y = values_of(tensor_to_host(layer.forward(xi, ctx)));
  r.dx = values_of(tensor_to_host(layer.backward(dyi, ctx)));
  ops_of(ctx).synchronize();
  for (Parameter* q : parameters_of(layer)) r.grads.push_back(values_of(tensor_to_host(q->grad)));
  return r;
}

StepContext gpu_context() {
  StepContext ctx;
  ctx.ops = gpu();
  ctx.seed = 7;
  ctx.step = 3;
  ctx.training = true;
  set_sixteen_bit_for(device_class_by_name(gpu()->sm() >= 80 ? "gpu-a100" : "gpu-t4"), ctx);
  return ctx;
}

// The CPU FP32 step of `make()`'s layer against the GPU step in precision p, same weights.
template <class Make>
void compare(const char* what, Make make, LayerPrecision p, const Tensor& x, const Tensor& dy) {
  std::mt19937_64 rng(4);
  auto cpu_layer = make();
  cpu_layer->init_parameters(rng);
  std::mt19937_64 rng2(4);
  auto gpu_layer = make();
  gpu_layer->init_parameters(rng2);
  place_on_gpu(*gpu_layer);
  StepContext cpu_ctx = device_step_context();
  const StepResult ref = step_on(*cpu_layer, LayerPrecision::FP32, x, dy, cpu_ctx, false);
  const StepResult got = step_on(*gpu_layer, p, x, dy, gpu_context(), true);
  const double ey = relative_error(got.y, ref.y), edx = relative_error(got.dx, ref.dx);
  const double edw = relative_error(got.grads[0], ref.grads[0]);
  const ErrorBounds b = precision_error_bounds(p);
  // fp32 on both devices: the same products summed in other orders (cuBLASLt, cuDNN vs
  // oneDNN): 1e-5 relative.
  const double by = p == LayerPrecision::FP32 ? 1e-5 : b.y, bdx = p == LayerPrecision::FP32 ? 1e-5 : b.dx,
               bdw = p == LayerPrecision::FP32 ? 1e-5 : b.dw;
  std::printf("[ gpu-vs-cpu ] %-9s %-8s y %.3g%% (bound %.3g%%)  dx %.3g%% (%.3g%%)  dW %.3g%% (%.3g%%)\n", what,
              layer_precision_name(p), ey * 100, by * 100, edx * 100, bdx * 100, edw * 100, bdw * 100);
  EXPECT_LE(ey, by) << what << " " << layer_precision_name(p);
  EXPECT_LE(edx, bdx) << what << " " << layer_precision_name(p);
  EXPECT_LE(edw, bdw) << what << " " << layer_precision_name(p);
}

class GpuLayerPrecision : public ::testing::TestWithParam<LayerPrecision> {};

TEST_P(GpuLayerPrecision, LinearConvAndAttentionWithinTheCpuBounds) {
  REQUIRE_GPU();
  activate_test_device_class();
  const LayerPrecision p = GetParam();
  if (!layer_precision_support(device_class_by_name(gpu()->sm() >= 89 ? "gpu-h100" : "gpu-a100"), p).ok ||
      (p == LayerPrecision::FP8 && gpu()->sm() < 89))
    GTEST_SKIP() << layer_precision_name(p) << " needs a newer GPU than sm" << gpu()->sm();
  std::mt19937_64 rng(11);
  {
    const Tensor x = normal_tensor({4, 24, 96}, rng), dy = normal_tensor({4, 24, 40}, rng);
    compare("linear", [] { return std::make_unique<LinearLayer>(linear_desc("fc", {24, 96}, 40), nullptr); }, p, x, dy);
  }
  {
    const Tensor x = normal_tensor({6, 5, 13, 11}, rng), dy = normal_tensor({6, 8, 7, 6}, rng);
    compare("conv2d", [] { return std::make_unique<Conv2dLayer>(conv_desc("conv", 5, 13, 11, 8, 3, 2, 1), nullptr); },
            p, x, dy);
  }
  {
    const Tensor x = normal_tensor({3, 20, 32}, rng), dy = normal_tensor({3, 20, 32}, rng);
    compare("attention", [] { return std::make_unique<AttentionLayer>(attention_desc("att", 20, 32, 4, true), nullptr); },
            p, x, dy);
  }
}

const LayerPrecision ALL_PRECISIONS[] = {LayerPrecision::FP32, LayerPrecision::TF32, LayerPrecision::BF16,
                                         LayerPrecision::FP16, LayerPrecision::INT8, LayerPrecision::INT8_ALL,
                                         LayerPrecision::FP8};
INSTANTIATE_TEST_SUITE_P(Precisions, GpuLayerPrecision, ::testing::ValuesIn(ALL_PRECISIONS), precision_test_name);

}  // namespace
}  // namespace qsync::testing
