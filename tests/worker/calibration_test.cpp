// File: tests/worker/calibration_test.cpp
// Unit tests for worker/calibration: `calibrate` runs of the MLP and of a strided conv model
// (each in a forked child: device classes are per process) give positive, self-consistent
// per-layer statistics with the right element counts; the exact im2col norm of Conv2d inputs;
// argument errors.
#include "worker/calibration.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "worker/data/fashion_mnist.h"
#include "worker/layers/conv2d.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

bool fashion_mnist_installed() {
  return fs::exists(fs::path(FASHION_MNIST_DEFAULT_DIR) / "train-images-idx3-ubyte.gz");
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("qsync_calibration_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Runs calibrate_run in a child process (it activates a device class, which is per process);
// true when the child wrote config.out.
bool calibrate_in_child(const CalibrateConfig& config) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      calibrate_run(config);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "calibrate_run: %s\n", e.what());
      code = 1;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && fs::exists(config.out);
}

// What holds for every layer of any calibration: positive stats, amax >= RMS >= 0 for each
// operand, max <= norm, small relative weight errors ordered fp16 < bf16 < fp8.
void expect_consistent(const LayerStats& l) {
  SCOPED_TRACE(l.layer);
  for (double v : {l.x_scale, l.w_scale, l.x_norm, l.w_norm, l.gw_norm, l.gw_max, l.dy_scale, l.dy_norm,
                   l.w_quant_error, l.w_error_fp16, l.w_error_bf16, l.w_error_fp8})
    EXPECT_GT(v, 0.0);
  EXPECT_GE(l.x_scale * 127, l.x_norm / std::sqrt(double(l.x_numel)));
  EXPECT_LE(l.x_scale * 127, l.x_norm);
  EXPECT_GE(l.w_scale * 127, l.w_norm / std::sqrt(double(l.w_numel)));
  EXPECT_LE(l.w_scale * 127, l.w_norm);
  EXPECT_GE(l.dy_scale * 127, l.dy_norm / std::sqrt(double(l.y_numel)));
  EXPECT_LE(l.dy_scale * 127, l.dy_norm);
  EXPECT_LE(l.gw_max, l.gw_norm);
  EXPECT_LT(l.w_quant_error, 0.05);
  EXPECT_LT(l.w_error_fp16, l.w_error_bf16);
  EXPECT_LT(l.w_error_bf16, l.w_error_fp8);
  EXPECT_LT(l.w_error_fp8, 0.1);
}

TEST(Calibration, MlpThreeStepsGivesConsistentStats) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  CalibrateConfig c;
  c.model = "mlp";
  c.steps = 3;
  c.batch = 16;
  c.out = dir.file("mlp.json");
  c.quiet = true;
  ASSERT_TRUE(calibrate_in_child(c));
  const CalibrationStats s = calibration_stats_load(c.out);
  const ModelDesc m = model_desc_find("mlp");
  calibration_stats_check(s, m);
  EXPECT_EQ(s.model, m.name);
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.batch, 16);
  ASSERT_EQ(s.layers.size(), 3u);
  const int64_t in[] = {784, 1024, 1024}, out[] = {1024, 1024, 10};
  for (int i = 0; i < 3; ++i) {
    const LayerStats& l = s.layers[size_t(i)];
    EXPECT_EQ(l.layer, "fc" + std::to_string(i + 1));
    EXPECT_EQ(l.depth, i);
    EXPECT_EQ(l.x_numel, 16 * in[i]);
    EXPECT_EQ(l.w_numel, out[i] * in[i]);
    EXPECT_EQ(l.y_numel, 16 * out[i]);
    expect_consistent(l);
  }
  // fc1's input is the normalized image: amax 2.023 (a white pixel in 3 x 16 images).
  EXPECT_NEAR(s.layers[0].x_scale * 127, (1 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD, 1e-3);
  // The stats feed the indicator: finite, >= 0, fp32 zero.
  for (const auto& [layer, row] : indicator_table(s, IndicatorKind::BIDIRECTIONAL))
    for (const auto& [p, v] : row) {
      EXPECT_TRUE(std::isfinite(v)) << layer;
      EXPECT_GE(v, 0.0) << layer;
      if (p == LayerPrecision::FP32) {
        EXPECT_EQ(v, 0.0);
      }
    }
}

TEST(Calibration, StridedConvCountsTheIm2colColumns) {
  if (!fashion_mnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  std::ofstream(dir.file("conv.yaml")) << "name: conv-test\ntask: classification\n"
                                          "input: {kind: image, shape: [1, 28, 28]}\nclasses: 10\nlayers:\n"
                                          "  - {name: conv, type: conv2d, out_channels: 4, kernel: 3, stride: 2, padding: 1}\n"
                                          "  - {name: relu, type: relu}\n  - {name: flatten, type: flatten}\n"
                                          "  - {name: head, type: linear, out: 10}\n";
  CalibrateConfig c;
  c.model = dir.file("conv.yaml");
  c.steps = 2;
  c.batch = 8;
  c.out = dir.file("conv.json");
  c.quiet = true;
  ASSERT_TRUE(calibrate_in_child(c));
  const CalibrationStats s = calibration_stats_load(c.out);
  ASSERT_EQ(s.layers.size(), 2u);
  const LayerStats& conv = s.layers[0];
  EXPECT_EQ(conv.layer, "conv");
  EXPECT_EQ(conv.x_numel, 8 * 14 * 14 * 9);  // B * H'W' * C k k
  EXPECT_EQ(conv.w_numel, 4 * 9);
  EXPECT_EQ(conv.y_numel, 8 * 4 * 14 * 14);
  EXPECT_EQ(s.layers[1].x_numel, 8 * 4 * 14 * 14);
  for (const LayerStats& l : s.layers) expect_consistent(l);
}

TEST(Calibration, ConvColumnNormEqualsTheNormOfIm2col) {
  for (int64_t stride : {1, 2, 3}) {
    const ModelDesc m = model_desc_parse(
        "name: c\ntask: classification\ninput: {kind: image, shape: [3, 7, 6]}\nclasses: 2\nlayers:\n"
        "  - {name: conv, type: conv2d, out_channels: 2, kernel: 3, stride: " +
            std::to_string(stride) + ", padding: 1}\n  - {name: flatten, type: flatten}\n"
                                     "  - {name: fc, type: linear, out: 2}\n",
        "c.yaml");
    const LayerDesc& d = *model_gemm_layers(m)[0];
    const ConvGeometry g{3, 7, 6, 3, stride, 1, d.out_shape[1], d.out_shape[2]};
    Tensor x = Tensor::empty({2, 3, 7, 6}, Precision::FP32, nullptr);
    std::mt19937_64 rng(static_cast<uint64_t>(stride));
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = n(rng);
    const int64_t taps = 27, cols_per = g.oh * g.ow;
    std::vector<float> cols(size_t(taps * 2 * cols_per));
    im2col(x.f32(), 4, 0, 2, g, cols.data());
    double sum = 0, amax = 0;
    for (float v : cols) {
      sum += double(v) * v;
      amax = std::max(amax, std::fabs(double(v)));
    }
    const ColumnNorm cn = conv_column_norm(d, x);
    EXPECT_NEAR(cn.norm, std::sqrt(sum), 1e-9 * std::sqrt(sum)) << "stride " << stride;
    EXPECT_EQ(cn.amax, amax) << "stride " << stride;
  }
}

TEST(Calibration, ArgumentErrorsNameTheFlag) {
  auto parse = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return calibrate_parse_args(int(argv.size()), argv.data());
  };
  auto expect_refused = [&](std::vector<std::string> args, const std::string& piece) {
    try {
      parse(args);
      ADD_FAILURE() << "accepted; expected an error with '" << piece << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
  };
  expect_refused({"--model", "mlp"}, "--out FILE is required");
  expect_refused({"--out", "x.json"}, "--model is required");
  expect_refused({"--model", "mlp", "--out", "x", "--frobnicate"}, "unknown argument '--frobnicate'");
  expect_refused({"--model", "mlp", "--out", "x", "--steps", "ten"}, "--steps expects an integer");
  expect_refused({"--model", "mlp", "--out"}, "--out needs a value");
  const CalibrateConfig c = parse({"--model", "cnn", "--out", "s.json", "--steps", "4", "--batch", "32", "--quiet"});
  EXPECT_EQ(c.model, "cnn");
  EXPECT_EQ(c.steps, 4);
  EXPECT_EQ(c.batch, 32);
  EXPECT_TRUE(c.quiet);
  EXPECT_EQ(CalibrateConfig().steps, 10);
}

}  // namespace
}  // namespace qsync
