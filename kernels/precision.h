// File: kernels/precision.h
// The one precision traits table of QSync. Every part of the project (kernels, worker,
// planner, operator) reads bytes per element, numeric range and conversions from here;
// nothing else hard-codes them.
//
//   const PrecisionTraits& t = precision_traits(Precision::BF16);
//   t.bytes == 2; t.max_finite == 3.3895314e38f; t.encode(1.0f) == 0x3f80;
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qsync {

enum class Precision : uint8_t {
  FP32,
  TF32,      // FP32 storage, 10-bit mantissa in the multiply (tensor cores)
  BF16,
  FP16,
  INT8,      // symmetric, per-tensor or per-channel scale held beside the data
  FP8_E4M3,  // forward format of FP8 training (no inf, max 448)
  FP8_E5M2,  // backward format of FP8 training (has inf, max 57344)
};
inline constexpr int PRECISION_COUNT = 7;

enum class NumberKind : uint8_t { FLOATING_POINT, FIXED_POINT };

struct PrecisionTraits {
  Precision precision;
  const char* name;          // canonical lower-case name used in plan files and CLIs
  int bytes;                 // storage bytes per element
  NumberKind kind;
  int exponent_bits;         // 0 for fixed point
  int mantissa_bits;         // explicit fraction bits (7 for INT8: magnitude bits)
  float max_finite;          // largest finite representable value (127 for INT8, in units of its scale)
  bool has_infinity;
  // Storage conversion, bit pattern in the low `bytes` bytes. encode rounds to nearest
  // even and saturates finite values to +-max_finite (INT8: to +-127, no scale applied).
  uint32_t (*encode)(float x);
  float (*decode)(uint32_t bits);
  // The smallest CUDA compute capability (major * 10 + minor) whose units compute GEMMs on
  // operands of this precision natively: tensor cores (TF32/BF16 sm80, FP16 sm70, INT8 IMMA
  // sm75, FP8 sm89); FP32 runs on the CUDA cores of every GPU (0). What each GPU device class
  // runs natively follows from its compute capability and this column (kernels/device_class.h).
  int cuda_native_sm;
};

const PrecisionTraits& precision_traits(Precision p);
const std::array<PrecisionTraits, PRECISION_COUNT>& precision_table();

inline const char* precision_name(Precision p) { return precision_traits(p).name; }
inline int precision_bytes(Precision p) { return precision_traits(p).bytes; }
// Whether values of this precision are stored scaled (INT8 and the FP8 formats: per-tensor or
// per-channel scales travel with the tensor).
inline bool precision_takes_scales(Precision p) {
  return p == Precision::INT8 || p == Precision::FP8_E4M3 || p == Precision::FP8_E5M2;
}

// Parses "fp32", "tf32", "bf16", "fp16", "int8", "fp8-e4m3", "fp8-e5m2".
// Throws std::invalid_argument listing the known names when `name` is none of them.
Precision precision_from_name(std::string_view name);

// "fp32, tf32, bf16, ..." for error messages.
std::string precision_names_joined();

}  // namespace qsync
