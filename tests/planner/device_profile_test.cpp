// File: tests/planner/device_profile_test.cpp
// Unit tests for planner/device_profile: JSON round trips, refusals of another version, model or
// batch, the cast fit, batch scaling, the profile store's preference order and its missing-profile
// message, communication profiles, and the GPU estimates (support, monotonicity, memory).
#include "planner/device_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "planner/atomic_file.h"
#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

using testing::ScratchDir;
using testing::expect_error;

ModelDesc mlp() { return model_desc_find("mlp"); }

// A measured-looking profile of `m` with distinct numbers everywhere.
DeviceProfile sample_profile(const ModelDesc& m, const std::string& device_class, int64_t batch) {
  DeviceProfile p;
  p.model = m.name;
  p.model_hash = m.hash;
  p.device_class = device_class;
  p.batch = batch;
  p.source = "measured on a test";
  double t = 1e-4;
  for (const LayerDesc* l : model_gemm_layers(m)) {
    p.gemm_layers[l->name][LayerPrecision::FP32] = {t, 2 * t, 1000 * batch, 0};
    p.gemm_layers[l->name][LayerPrecision::INT8] = {t / 2, 1.5 * t, 250 * batch, 4096};
    t *= 1.7;
  }
  for (const LayerDesc* l : model_leaf_layers(m))
    if (l->kind != LayerKind::LINEAR) p.other_layers[l->name] = {t / 10, t / 5, 100 * batch, 0};
  p.casts[{Precision::FP32, Precision::INT8}] = {3.25e-10, 1.5e-6};
  p.casts[{Precision::INT8, Precision::BF16}] = {2.5e-10, 1e-6};
  p.channel_casts[{Precision::FP32, Precision::INT8}] = {4.125e-10, 2e-6};
  p.optimizer_seconds = 0.0123456789;
  p.static_bytes = 123456789;
  p.step_overhead_seconds = 0.000321;
  p.step_jitter = 0.0375;
  p.world_size = 3;
  p.world_step_seconds = 0.0268306;
  p.world_signature = "cpu-avx2@43x1,cpu-sse41@43x1,cpu-sse41@42x1 unpinned";
  return p;
}

void expect_same(const DeviceProfile& a, const DeviceProfile& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.model_hash, b.model_hash);
  EXPECT_EQ(a.device_class, b.device_class);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.estimated, b.estimated);
  EXPECT_EQ(a.source, b.source);
  ASSERT_EQ(a.gemm_layers.size(), b.gemm_layers.size());
  for (const auto& [layer, costs] : a.gemm_layers)
    for (const auto& [prec, c] : costs) {
      const LayerCost& d = b.gemm_layers.at(layer).at(prec);
      EXPECT_EQ(c.forward_seconds, d.forward_seconds) << layer;
      EXPECT_EQ(c.backward_seconds, d.backward_seconds) << layer;
      EXPECT_EQ(c.saved_bytes, d.saved_bytes) << layer;
      EXPECT_EQ(c.weight_bytes, d.weight_bytes) << layer;
    }
  ASSERT_EQ(a.other_layers.size(), b.other_layers.size());
  for (const auto& [layer, c] : a.other_layers) EXPECT_EQ(c.backward_seconds, b.other_layers.at(layer).backward_seconds);
  ASSERT_EQ(a.casts.size(), b.casts.size());
  for (const auto& [k, c] : a.casts) {
    EXPECT_EQ(c.a, b.casts.at(k).a);
    EXPECT_EQ(c.b, b.casts.at(k).b);
  }
  ASSERT_EQ(a.channel_casts.size(), b.channel_casts.size());
  EXPECT_EQ(a.optimizer_seconds, b.optimizer_seconds);
  EXPECT_EQ(a.static_bytes, b.static_bytes);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.step_overhead_seconds, b.step_overhead_seconds);
  EXPECT_EQ(a.step_jitter, b.step_jitter);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.world_step_seconds, b.world_step_seconds);
  EXPECT_EQ(a.world_signature, b.world_signature);
}

TEST(DeviceProfile, JsonRoundTripIsExact) {
  ScratchDir dir;
  const ModelDesc m = mlp();
  const DeviceProfile p = sample_profile(m, "cpu-avx2", 64);
  device_profile_write(dir.file("p.profile.json"), p);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"p.profile.json"});  // no temp file left
  const DeviceProfile q = device_profile_load(dir.file("p.profile.json"));
  expect_same(p, q);
  EXPECT_EQ(q.precisions(), (std::vector<LayerPrecision>{LayerPrecision::FP32, LayerPrecision::INT8}));
  const DeviceProfile e = device_profile_estimate(m, "gpu-h100", 32);  // every field set
  expect_same(e, device_profile_from_json(device_profile_to_json(e), "estimate"));
}

TEST(DeviceProfile, RefusesAnotherVersionOrAMalformedFile) {
  ScratchDir dir;
  std::string text = device_profile_to_json(sample_profile(mlp(), "cpu-avx2", 64));
  const std::string v1 = "\"version\": 1";
  ASSERT_NE(text.find(v1), std::string::npos);
  text.replace(text.find(v1), v1.size(), "\"version\": 2");
  atomic_file_write(dir.file("v2.profile.json"), text);
  expect_error<std::invalid_argument>([&] { device_profile_load(dir.file("v2.profile.json")); },
                                      {"v2.profile.json", "version 2", "reads version 1", "re-measure"});
  atomic_file_write(dir.file("bad.profile.json"), "{\"kind\": \"qsync-device-profile\", ");
  expect_error<std::invalid_argument>([&] { device_profile_load(dir.file("bad.profile.json")); },
                                      {"bad.profile.json", "not valid JSON"});
  atomic_file_write(dir.file("comm.json"), "{\"kind\": \"qsync-comm-profile\", \"version\": 1}");
  expect_error<std::invalid_argument>([&] { device_profile_load(dir.file("comm.json")); },
                                      {"comm.json", "not a qsync-device-profile"});
  expect_error<std::invalid_argument>([&] { comm_profile_load(dir.file("comm.json")); },
                                      {"comm.json", "malformed communication profile", "world_size"});
  expect_error<std::runtime_error>([&] { device_profile_load(dir.file("missing.json")); }, {"missing.json"});
}

// Found by tests/fuzz (device_profile): a number past double's range is JSON nlohmann refuses
// with out_of_range, not parse_error; it escaped as "[json.exception.out_of_range.406]".
TEST(DeviceProfile, RefusesANumberPastDoublesRangeAsMalformed) {
  ScratchDir dir;
  const std::string text = "{\"kind\": \"qsync-device-profile\", \"version\": 1, \"batch\": 1.4e884}";
  expect_error<std::invalid_argument>([&] { device_profile_from_json(text, "huge.profile.json"); },
                                      {"huge.profile.json", "not valid JSON", "number overflow"});
  // Not an object, or kind and version of other types: a wrong file, not nlohmann's type_error.
  for (const std::string& bad : {std::string("[1, 2]"), std::string("7"), std::string("{\"kind\": [1]}"),
                                 std::string("{\"kind\": \"qsync-device-profile\", \"version\": \"1\"}")})
    expect_error<std::invalid_argument>([&] { device_profile_from_json(bad, "odd.profile.json"); }, {"odd.profile.json"});
  atomic_file_write(dir.file("comm.json"), "{\"kind\": \"qsync-comm-profile\", \"alpha\": -3e999}");
  expect_error<std::invalid_argument>([&] { comm_profile_load(dir.file("comm.json")); }, {"comm.json", "not valid JSON"});
}

// Found by tests/fuzz (device_profile): a float where an integer belongs (5.1e+35 saved bytes) was
// converted to int64_t, which is undefined beyond its range. Integer fields take JSON integers
// within their type's range, and say which field is wrong.
TEST(DeviceProfile, RefusesAFloatOrAnOutOfRangeIntegerWhereAnIntegerBelongs) {
  const std::string good = device_profile_to_json(sample_profile(mlp(), "cpu-avx2", 64));
  ASSERT_NO_THROW(device_profile_from_json(good, "good.profile.json"));
  const std::string field = "\"static_bytes\": ";
  const size_t at = good.find(field);
  ASSERT_NE(at, std::string::npos);
  const size_t end = good.find_first_of(",\n}", at + field.size());
  for (const std::string& bad : {std::string("5.1e+35"), std::string("12.0"), std::string("18446744073709551615")}) {
    std::string text = good;
    text.replace(at + field.size(), end - at - field.size(), bad);
    expect_error<std::invalid_argument>([&] { device_profile_from_json(text, "float.profile.json"); },
                                        {"float.profile.json", "static_bytes"});
  }
  for (const std::string& bad : {std::string("4.0"), std::string("3000000000")})
    expect_error<std::invalid_argument>(
        [&] {
          comm_profile_from_json("{\"kind\": \"qsync-comm-profile\", \"version\": 1, \"world_size\": " + bad +
                                     ", \"alpha\": 0.001, \"beta\": 1e-9}",
                                 "comm.json");
        },
        {"comm.json", "world_size"});
}

TEST(DeviceProfile, CheckRefusesAnotherModelOrBatchNamingBoth) {
  const ModelDesc m = mlp(), cnn = model_desc_find("cnn");
  const DeviceProfile p = sample_profile(m, "cpu-avx2", 64);
  EXPECT_NO_THROW(device_profile_check(p, m, 64, "p.json"));
  EXPECT_NO_THROW(device_profile_check(p, m, 0, "p.json"));  // 0: any batch
  expect_error<std::invalid_argument>([&] { device_profile_check(p, cnn, 64, "p.json"); },
                                      {"p.json", "'mlp-fmnist'", "'cnn-fmnist'", model_hash_string(m.hash),
                                       model_hash_string(cnn.hash), "qsync-worker profile --model"});
  DeviceProfile other_hash = p;
  other_hash.model_hash ^= 1;
  expect_error<std::invalid_argument>([&] { device_profile_check(other_hash, m, 64, "p.json"); },
                                      {model_hash_string(other_hash.model_hash), model_hash_string(m.hash)});
  expect_error<std::invalid_argument>([&] { device_profile_check(p, m, 128, "p.json"); },
                                      {"p.json", "batch 64", "batch 128", "--batch 128"});
}

TEST(DeviceProfile, FitLinearCostRecoversExactLines) {
  const std::vector<int64_t> n = {4096, 16384, 65536, 262144, 1048576, 4194304};
  std::vector<double> t;
  for (int64_t x : n) t.push_back(2.5e-10 * double(x) + 3e-6);
  const LinearCost f = fit_linear_cost(n, t);
  EXPECT_NEAR(f.a, 2.5e-10, 1e-18);
  EXPECT_NEAR(f.b, 3e-6, 1e-12);
  EXPECT_NEAR(f.at(1000000), 2.5e-10 * 1e6 + 3e-6, 1e-12);
  const LinearCost one = fit_linear_cost({4096}, {7e-6});  // one point: b only
  EXPECT_EQ(one.a, 0);
  EXPECT_DOUBLE_EQ(one.b, 7e-6);
  // Never negative: a line through the origin when b would be < 0, the mean when a would be.
  const LinearCost origin = fit_linear_cost({1000, 2000, 3000}, {0.5e-6, 1.6e-6, 2.4e-6});
  EXPECT_EQ(origin.b, 0);
  EXPECT_GT(origin.a, 0);
  const LinearCost flat = fit_linear_cost({1000, 2000}, {3e-6, 1e-6});
  EXPECT_EQ(flat.a, 0);
  EXPECT_DOUBLE_EQ(flat.b, 2e-6);
  expect_error<std::invalid_argument>([] { fit_linear_cost({}, {}); }, {"at least one point"});
  expect_error<std::invalid_argument>([] { fit_linear_cost({1, 2}, {1.0}); }, {"2 sizes and 1 times"});
}

TEST(DeviceProfile, RelativeFitKeepsTheInterceptOfSmallSizes) {
  // An exact line is recovered by both fits.
  const std::vector<int64_t> n = {4, 64, 1024, 16384, 262144, 4194304, 16777216};
  std::vector<double> t;
  for (int64_t x : n) t.push_back(1e-9 * double(x) + 90e-6);
  const LinearCost exact = fit_linear_cost_relative(n, t);
  EXPECT_NEAR(exact.a, 1e-9, 1e-15);
  EXPECT_NEAR(exact.b, 90e-6, 1e-10);
  // 20% noise at 4 MiB more than doubles the plain fit's intercept (to about 200 us); the
  // relative fit keeps the small sizes' 90 us within 10%.
  t[5] *= 1.2;
  EXPECT_GT(fit_linear_cost(n, t).b, 180e-6);
  EXPECT_NEAR(fit_linear_cost_relative(n, t).b, 90e-6, 9e-6);
  EXPECT_EQ(fit_linear_cost_relative({4096}, {7e-6}).a, 0);  // one size: a constant
  EXPECT_DOUBLE_EQ(fit_linear_cost_relative({4096}, {7e-6}).b, 7e-6);
  expect_error<std::invalid_argument>([] { fit_linear_cost_relative({}, {}); }, {"at least one point"});
}

TEST(DeviceProfile, ScaledMovesTimesAndActivationsWithTheBatch) {
  const DeviceProfile p = sample_profile(mlp(), "cpu-avx2", 64);
  const DeviceProfile s = device_profile_scaled(p, 128);
  EXPECT_EQ(s.batch, 128);
  const LayerCost& a = p.gemm_layers.at("fc1").at(LayerPrecision::INT8);
  const LayerCost& b = s.gemm_layers.at("fc1").at(LayerPrecision::INT8);
  EXPECT_DOUBLE_EQ(b.forward_seconds, 2 * a.forward_seconds);
  EXPECT_DOUBLE_EQ(b.backward_seconds, 2 * a.backward_seconds);
  EXPECT_EQ(b.saved_bytes, 2 * a.saved_bytes);
  EXPECT_EQ(b.weight_bytes, a.weight_bytes);  // weight copies do not grow with the batch
  EXPECT_DOUBLE_EQ(s.other_layers.at("relu1").forward_seconds, 2 * p.other_layers.at("relu1").forward_seconds);
  EXPECT_EQ(s.optimizer_seconds, p.optimizer_seconds);
  EXPECT_EQ(s.static_bytes, p.static_bytes);
  EXPECT_EQ(s.casts.at({Precision::FP32, Precision::INT8}).a, p.casts.at({Precision::FP32, Precision::INT8}).a);
  EXPECT_NE(s.source.find("scaled linearly from batch 64"), std::string::npos);
  EXPECT_EQ(device_profile_scaled(p, 64).source, p.source);
  expect_error<std::invalid_argument>([&] { device_profile_scaled(p, 0); }, {"positive"});
}

TEST(ProfileStore, PrefersMeasuredExactThenMeasuredScaledThenEstimate) {
  ScratchDir dir;
  const ModelDesc m = mlp();
  DeviceProfile b64 = sample_profile(m, "cpu-avx2", 64), b16 = sample_profile(m, "cpu-avx2", 16);
  b16.optimizer_seconds = 1;  // tells the two apart
  device_profile_write(dir.file(device_profile_file_name(m.name, "cpu-avx2", 64)), b64);
  device_profile_write(dir.file(device_profile_file_name(m.name, "cpu-avx2", 16)), b16);
  device_profile_write(dir.file("a100.profile.json"), sample_profile(m, "gpu-a100", 32));
  atomic_file_write(dir.file("notes.txt"), "ignored");
  const ProfileStore store(dir.path().string());
  EXPECT_EQ(store.measured().size(), 3u);

  const DeviceProfile exact = store.find(m, "cpu-avx2", 64);
  EXPECT_EQ(exact.batch, 64);
  EXPECT_EQ(exact.source, b64.source);
  const DeviceProfile exact16 = store.find(m, "cpu-avx2", 16);
  EXPECT_EQ(exact16.optimizer_seconds, 1);
  const DeviceProfile scaled = store.find(m, "cpu-avx2", 128);  // nearest batch: 64
  EXPECT_EQ(scaled.batch, 128);
  EXPECT_DOUBLE_EQ(scaled.gemm_layers.at("fc2").at(LayerPrecision::FP32).forward_seconds,
                   2 * b64.gemm_layers.at("fc2").at(LayerPrecision::FP32).forward_seconds);
  EXPECT_EQ(store.find(m, "cpu-avx2", 20).optimizer_seconds, 1);  // nearest batch: 16
  const DeviceProfile gpu = store.find(m, "gpu-a100", 64);  // a measured GPU profile beats the estimate
  EXPECT_FALSE(gpu.estimated);
  EXPECT_EQ(gpu.batch, 64);
  const DeviceProfile estimate = store.find(m, "gpu-h100", 64);
  EXPECT_TRUE(estimate.estimated);
  EXPECT_EQ(estimate.device_class, "gpu-h100");
  EXPECT_TRUE(ProfileStore("").find(m, "gpu-t4", 8).estimated);
}

TEST(ProfileStore, MissingProfileNamesModelClassBatchAndTheCommand) {
  ScratchDir dir;
  const ModelDesc m = mlp();
  DeviceProfile stale = sample_profile(m, "cpu-avx512", 32);
  stale.model_hash ^= 0xff;
  device_profile_write(dir.file("stale.profile.json"), stale);
  const ProfileStore store(dir.path().string());
  const std::string out = dir.file(device_profile_file_name(m.name, "cpu-avx512", 64));
  expect_error<std::invalid_argument>(
      [&] { store.find(m, "cpu-avx512", 64); },
      {"no device profile of model 'mlp-fmnist'", model_hash_string(m.hash), "device class cpu-avx512", "batch 64",
       "`qsync-worker profile --model " + m.source + " --device-class cpu-avx512 --batch 64 --out " + out + "`",
       "another hash", model_hash_string(stale.model_hash), "gpu-a100"});
  expect_error<std::invalid_argument>([&] { ProfileStore("").find(m, "cpu-amx", 8); },
                                      {"no profile directory given", "--device-class cpu-amx --batch 8"});
  expect_error<std::invalid_argument>([&] { ProfileStore(dir.file("nowhere")); }, {"nowhere", "does not exist"});
  atomic_file_write(dir.file("broken.profile.json"), "not json");
  expect_error<std::invalid_argument>([&] { ProfileStore{dir.path().string()}; }, {"broken.profile.json", "not valid JSON"});
}

TEST(ProfileStore, CommMeasuredRescaledOrEstimated) {
  ScratchDir dir;
  CommProfile c;
  c.world_size = 2;
  c.alpha = 1e-4;
  c.beta = 2e-10;
  c.late_alpha = 5e-5;
  c.late_beta = 1.2e-10;
  c.source = "measured: test";
  comm_profile_write(dir.file("comm.json"), c);
  const CommProfile back = comm_profile_load(dir.file("comm.json"));
  EXPECT_EQ(back.alpha, c.alpha);
  EXPECT_EQ(back.beta, c.beta);
  EXPECT_EQ(back.late_alpha, c.late_alpha);
  EXPECT_EQ(back.late_beta, c.late_beta);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_FALSE(back.estimated);
  const ProfileStore store(dir.path().string());
  EXPECT_EQ(store.comm(2).alpha, c.alpha);
  const CommProfile four = store.comm(4);  // ring: 3x the steps, (3/4)/(1/2) the traffic
  EXPECT_DOUBLE_EQ(four.alpha, 3 * c.alpha);
  EXPECT_DOUBLE_EQ(four.beta, 1.5 * c.beta);
  EXPECT_DOUBLE_EQ(four.late_alpha, 3 * c.late_alpha);
  EXPECT_DOUBLE_EQ(four.late_beta, 1.5 * c.late_beta);
  EXPECT_TRUE(four.estimated);
  // A profile from before the late costs were measured loads with none (the time together).
  const CommProfile old = comm_profile_from_json(
      "{\"kind\": \"qsync-comm-profile\", \"version\": 1, \"world_size\": 2, \"alpha\": 1e-4, \"beta\": 2e-10}", "old");
  EXPECT_EQ(old.late_alpha, 0);
  EXPECT_EQ(old.late_beta, 0);
  EXPECT_DOUBLE_EQ(old.seconds_after(1 << 20, 1.0), old.seconds(1 << 20));
  const CommProfile est = ProfileStore("").comm(4);
  EXPECT_TRUE(est.estimated);
  EXPECT_GT(est.alpha, 0);
  EXPECT_GT(est.seconds(1 << 20), est.seconds(1 << 10));
  EXPECT_EQ(ProfileStore("").comm(1).seconds(1 << 20), 0);
}

double step_seconds(const DeviceProfile& p, LayerPrecision lp) {
  double s = 0;
  for (const auto& [layer, costs] : p.gemm_layers) s += costs.at(lp).forward_seconds + costs.at(lp).backward_seconds;
  return s;
}

TEST(EstimatedProfiles, SupportFollowsTheHardware) {
  const ModelDesc m = mlp();
  using LP = LayerPrecision;
  const std::vector<LP> no_bf16 = {LP::FP32, LP::FP16, LP::INT8, LP::INT8_ALL};
  EXPECT_EQ(device_profile_estimate(m, "gpu-t4", 64).precisions(), no_bf16);
  // The V100 (short spelling): CUDA 13 cannot compile for sm70, so it is refused at plan time.
  expect_error<std::invalid_argument>([&] { device_profile_estimate(m, "v100", 64); }, {"gpu-v100", "CUDA 13"});
  const std::vector<LP> ampere = {LP::FP32, LP::TF32, LP::BF16, LP::FP16, LP::INT8, LP::INT8_ALL};
  EXPECT_EQ(device_profile_estimate(m, "gpu-a100", 64).precisions(), ampere);
  EXPECT_EQ(device_profile_estimate(m, "gpu-a10", 64).precisions(), ampere);
  for (const char* c : {"gpu-l4", "gpu-h100", "gpu-h200"})
    EXPECT_EQ(device_profile_estimate(m, c, 64).precisions().back(), LP::FP8) << c;
  EXPECT_EQ(estimated_gpu_classes().size(), 7u);
  for (const std::string& c : estimated_gpu_classes()) EXPECT_TRUE(is_estimated_gpu_class(c));
  EXPECT_FALSE(is_estimated_gpu_class("cpu-avx2"));
  expect_error<std::invalid_argument>([&] { device_profile_estimate(m, "gpu-b200", 64); },
                                      {"gpu-b200", "gpu-t4", "gpu-h200", "qsync-worker profile"});
}

TEST(EstimatedProfiles, AreMonotoneInPrecisionAndHardware) {
  const ModelDesc cnn = model_desc_find("cnn");
  const DeviceProfile a100 = device_profile_estimate(cnn, "gpu-a100", 256);
  EXPECT_TRUE(a100.estimated);
  EXPECT_NE(a100.source.find("ESTIMATE"), std::string::npos);
  EXPECT_LT(step_seconds(a100, LayerPrecision::INT8_ALL), step_seconds(a100, LayerPrecision::FP32));
  EXPECT_LT(step_seconds(a100, LayerPrecision::INT8), step_seconds(a100, LayerPrecision::FP32));
  EXPECT_LT(step_seconds(a100, LayerPrecision::FP16), step_seconds(a100, LayerPrecision::FP32));
  const LayerCost& f32 = a100.gemm_layers.at("conv2").at(LayerPrecision::FP32);
  const LayerCost& i8 = a100.gemm_layers.at("conv2").at(LayerPrecision::INT8);
  const LayerCost& f16 = a100.gemm_layers.at("conv2").at(LayerPrecision::FP16);
  EXPECT_LT(i8.forward_seconds, f32.forward_seconds);
  EXPECT_LT(i8.saved_bytes, f16.saved_bytes);
  EXPECT_LT(f16.saved_bytes, f32.saved_bytes);
  EXPECT_EQ(f32.saved_bytes, 256 * 32 * 28 * 28 * 4);  // conv2's FP32 input
  EXPECT_EQ(f32.weight_bytes, 0);
  EXPECT_EQ(i8.weight_bytes, 32 * 32 * 3 * 3);
  // Newer parts are faster at every precision they share; the T4 is the slowest.
  const DeviceProfile t4 = device_profile_estimate(cnn, "gpu-t4", 256), h100 = device_profile_estimate(cnn, "gpu-h100", 256);
  for (LayerPrecision lp : {LayerPrecision::FP32, LayerPrecision::FP16, LayerPrecision::INT8}) {
    EXPECT_LT(step_seconds(h100, lp), step_seconds(a100, lp));
    EXPECT_LT(step_seconds(a100, lp), step_seconds(t4, lp));
  }
  EXPECT_LT(device_profile_estimate(cnn, "gpu-h200", 256).optimizer_seconds, h100.optimizer_seconds);  // bandwidth
  // Times grow with the batch; memory and static bytes are the device's and the model's.
  EXPECT_GT(step_seconds(device_profile_estimate(cnn, "gpu-a100", 1024), LayerPrecision::FP32), step_seconds(a100, LayerPrecision::FP32));
  const int64_t GiB = int64_t(1) << 30;
  EXPECT_EQ(a100.memory_bytes, 80 * GiB);
  EXPECT_EQ(t4.memory_bytes, 16 * GiB);
  EXPECT_EQ(device_profile_estimate(cnn, "gpu-h200", 8).memory_bytes, 141 * GiB);
  EXPECT_EQ(a100.static_bytes, model_parameter_count(cnn) * 4 * 4);  // params, grads, AdamW m and v
  EXPECT_GT(a100.optimizer_seconds, 0);
  EXPECT_GT(a100.other_layers.at("relu1").forward_seconds, 0);
  EXPECT_EQ(a100.other_layers.at("relu1").saved_bytes, 256 * 32 * 28 * 28);  // a 1-byte mask
  EXPECT_EQ(a100.other_layers.at("flatten").forward_seconds, 0);
  EXPECT_GT(a100.casts.at({Precision::FP32, Precision::INT8}).a, 0);
  EXPECT_GT(a100.channel_casts.at({Precision::FP32, Precision::INT8}).a, 0);
}

TEST(EstimatedProfiles, CoverTransformerLeaves) {
  const ModelDesc vit = model_desc_find("vit");
  const DeviceProfile p = device_profile_estimate(vit, "gpu-l4", 32);
  for (const LayerDesc* l : model_gemm_layers(vit)) EXPECT_EQ(p.gemm_layers.count(l->name), 1u) << l->name;
  for (const LayerDesc* l : model_leaf_layers(vit)) {
    if (l->kind != LayerKind::LINEAR && l->kind != LayerKind::CONV2D) {
      EXPECT_EQ(p.other_layers.count(l->name), 1u) << l->name;
    }
  }
  const LayerCost& attn = p.other_layers.at("blocks.0.attn");
  EXPECT_GT(attn.forward_seconds, 0);
  EXPECT_EQ(attn.saved_bytes, 32 * (16 * 3 * 64 + 4 * 16 * 16) * 4);  // qkv and the probabilities
  EXPECT_GT(p.gemm_layers.at("blocks.0.attn.qkv").at(LayerPrecision::FP8).forward_seconds, 0);
}

}  // namespace
}  // namespace qsync
