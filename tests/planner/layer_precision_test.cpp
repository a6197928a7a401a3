// File: tests/planner/layer_precision_test.cpp
// Tests of planner/layer_precision.h: the table is indexed by mode, names round-trip, each
// mode's forward/backward/saved precisions are as documented, and unknown names list the known.
#include "planner/layer_precision.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

TEST(LayerPrecision, TableIsIndexedByModeAndNamesRoundTrip) {
  const auto& table = layer_precision_table();
  ASSERT_EQ(table.size(), size_t(LAYER_PRECISION_COUNT));
  std::set<std::string> names;
  std::set<int> aggressiveness;
  for (size_t i = 0; i < table.size(); ++i) {
    SCOPED_TRACE(table[i].name);
    EXPECT_EQ(size_t(table[i].mode), i);
    EXPECT_EQ(&layer_precision_traits(table[i].mode), &table[i]);
    EXPECT_STREQ(layer_precision_name(table[i].mode), table[i].name);
    EXPECT_EQ(layer_precision_from_name(table[i].name), table[i].mode);
    names.insert(table[i].name);
    aggressiveness.insert(table[i].aggressiveness);
  }
  EXPECT_EQ(names.size(), table.size());
  EXPECT_EQ(aggressiveness.size(), table.size()) << "aggressiveness must order the modes strictly";
  EXPECT_EQ(layer_precision_names_joined(), "fp32, tf32, bf16, fp16, int8, int8-all, fp8");
}

TEST(LayerPrecision, TraitsAreAsDocumented) {
  const auto& fp32 = layer_precision_traits(LayerPrecision::FP32);
  EXPECT_EQ(fp32.forward, Precision::FP32);
  EXPECT_EQ(fp32.backward, BackwardKind::SAME_AS_FORWARD);
  EXPECT_EQ(fp32.aggressiveness, 0);
  for (LayerPrecision p : {LayerPrecision::BF16, LayerPrecision::FP16}) {
    const auto& t = layer_precision_traits(p);
    EXPECT_EQ(t.backward, BackwardKind::SAME_AS_FORWARD);
    EXPECT_EQ(t.saved_activation, t.forward);
    EXPECT_EQ(precision_bytes(t.saved_activation), 2);
  }
  const auto& int8 = layer_precision_traits(LayerPrecision::INT8);
  EXPECT_EQ(int8.forward, Precision::INT8);
  EXPECT_EQ(int8.backward, BackwardKind::SIXTEEN_BIT);
  EXPECT_EQ(precision_bytes(int8.saved_activation), 1);
  EXPECT_EQ(layer_precision_traits(LayerPrecision::INT8_ALL).backward, BackwardKind::INT8);
  EXPECT_GT(layer_precision_traits(LayerPrecision::INT8_ALL).aggressiveness, int8.aggressiveness);
  const auto& fp8 = layer_precision_traits(LayerPrecision::FP8);
  EXPECT_EQ(fp8.forward, Precision::FP8_E4M3);
  EXPECT_EQ(fp8.backward, BackwardKind::FP8_E5M2);
  EXPECT_EQ(fp8.saved_activation, Precision::FP8_E4M3);
}

// tf32: FP32 tensors read by TF32 tensor cores, no weight copy, right above fp32.
TEST(LayerPrecision, Tf32IsFp32StorageOnTensorCores) {
  const auto& t = layer_precision_traits(LayerPrecision::TF32);
  EXPECT_EQ(t.forward, Precision::TF32);
  EXPECT_EQ(t.backward, BackwardKind::SAME_AS_FORWARD);
  EXPECT_EQ(precision_bytes(t.saved_activation), 4);
  EXPECT_FALSE(t.weight_copy);
  EXPECT_FALSE(layer_precision_traits(LayerPrecision::FP32).weight_copy);
  EXPECT_TRUE(layer_precision_traits(LayerPrecision::BF16).weight_copy);
  EXPECT_EQ(t.aggressiveness, 1);
  EXPECT_LT(t.aggressiveness, layer_precision_traits(LayerPrecision::FP16).aggressiveness);
}

// The one rule of what a class runs: GPUs what their tensor cores compute (int8's backward in
// BF16 from sm80, else FP16), nothing on a V100 (CUDA 13), everything but tf32 on CPUs.
TEST(LayerPrecision, SupportFollowsTheDeviceClass) {
  using LP = LayerPrecision;
  auto ok = [](const char* cls, LP p) { return layer_precision_support(device_class_by_name(cls), p).ok; };
  EXPECT_FALSE(ok("cpu-avx2", LP::TF32));
  EXPECT_TRUE(ok("cpu-avx2", LP::FP8));  // emulated on CPUs, as documented
  EXPECT_FALSE(ok("gpu-t4", LP::BF16));
  EXPECT_FALSE(ok("gpu-t4", LP::TF32));
  EXPECT_TRUE(ok("gpu-t4", LP::INT8));
  EXPECT_FALSE(ok("gpu-t4", LP::FP8));
  EXPECT_FALSE(ok("gpu-a100", LP::FP8));
  EXPECT_TRUE(ok("gpu-a10", LP::TF32));
  for (LP p : {LP::FP32, LP::TF32, LP::BF16, LP::FP16, LP::INT8, LP::INT8_ALL, LP::FP8}) {
    EXPECT_TRUE(ok("gpu-h200", p)) << layer_precision_name(p);
    EXPECT_FALSE(ok("gpu-v100", p)) << layer_precision_name(p);
  }
  const std::string why = layer_precision_support(device_class_by_name("gpu-v100"), LP::INT8).why;
  EXPECT_NE(why.find("CUDA 13"), std::string::npos) << why;
  EXPECT_EQ(layer_precision_gemms(device_class_by_name("gpu-t4"), LP::INT8).backward_gradient, Precision::FP16);
  EXPECT_EQ(layer_precision_gemms(device_class_by_name("gpu-a100"), LP::INT8).backward_gradient, Precision::BF16);
  EXPECT_EQ(layer_precision_gemms(device_class_by_name("gpu-h100"), LP::FP8).backward_gradient, Precision::FP8_E5M2);
}

TEST(LayerPrecision, UnknownNameListsTheKnownOnes) {
  qsync::testing::expect_error<std::invalid_argument>(
      [] { layer_precision_from_name("int4"); },
      {"unknown layer precision 'int4'", "known: fp32, tf32, bf16, fp16, int8, int8-all, fp8"});
  qsync::testing::expect_error<std::invalid_argument>([] { layer_precision_from_name("FP32"); },
                                                      {"unknown layer precision 'FP32'"});
}

}  // namespace
}  // namespace qsync
