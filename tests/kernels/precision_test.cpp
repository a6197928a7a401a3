// Unit tests for kernels/precision.h: the traits table agrees with the formats it describes.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/precision.h"

namespace qsync {
namespace {

TEST(PrecisionTraits, TableIsIndexedByEnumAndNamesRoundTrip) {
  for (size_t i = 0; i < precision_table().size(); ++i) {
    const PrecisionTraits& t = precision_table()[i];
    EXPECT_EQ(size_t(t.precision), i);
    EXPECT_EQ(precision_from_name(t.name), t.precision);
  }
}

TEST(PrecisionTraits, BytesAndRanges) {
  EXPECT_EQ(precision_bytes(Precision::FP32), 4);
  EXPECT_EQ(precision_bytes(Precision::TF32), 4);
  EXPECT_EQ(precision_bytes(Precision::BF16), 2);
  EXPECT_EQ(precision_bytes(Precision::FP16), 2);
  EXPECT_EQ(precision_bytes(Precision::INT8), 1);
  EXPECT_EQ(precision_bytes(Precision::FP8_E4M3), 1);
  EXPECT_EQ(precision_bytes(Precision::FP8_E5M2), 1);
  EXPECT_EQ(precision_traits(Precision::FP16).max_finite, 65504.0f);
  EXPECT_EQ(precision_traits(Precision::FP8_E4M3).max_finite, 448.0f);
  EXPECT_EQ(precision_traits(Precision::FP8_E5M2).max_finite, 57344.0f);
  EXPECT_EQ(precision_traits(Precision::INT8).kind, NumberKind::FIXED_POINT);
  EXPECT_FALSE(precision_traits(Precision::FP8_E4M3).has_infinity);
}

TEST(PrecisionTraits, MaxFiniteIsRepresentableAndSaturates) {
  for (const PrecisionTraits& t : precision_table()) {
    SCOPED_TRACE(t.name);
    // max_finite encodes and decodes to itself ...
    EXPECT_EQ(t.decode(t.encode(t.max_finite)), t.max_finite);
    EXPECT_EQ(t.decode(t.encode(-t.max_finite)), -t.max_finite);
    // ... and a finite value past it saturates to it (no inf, no wrap-around). For the formats
    // with FP32's 8-bit exponent the largest float is the largest value past max_finite.
    const float big = t.exponent_bits == 8 ? 3.40282347e38f : t.max_finite * 4.0f;
    EXPECT_EQ(t.decode(t.encode(big)), t.max_finite);
  }
}

TEST(PrecisionTraits, MantissaWidthMatchesSpacingAboveOne) {
  // The gap between 1 and the next representable value is 2^-mantissa_bits for float formats.
  for (const PrecisionTraits& t : precision_table()) {
    if (t.kind != NumberKind::FLOATING_POINT) continue;
    SCOPED_TRACE(t.name);
    const float ulp = std::ldexp(1.0f, -t.mantissa_bits);
    EXPECT_EQ(t.decode(t.encode(1.0f + ulp)), 1.0f + ulp);
    EXPECT_EQ(t.decode(t.encode(1.0f + ulp * 0.25f)), 1.0f);  // rounds to nearest
  }
}

TEST(PrecisionTraits, UnknownNameListsKnownOnes) {
  try {
    precision_from_name("int4");
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8-e4m3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync
