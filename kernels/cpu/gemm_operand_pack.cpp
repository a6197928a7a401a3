// File: kernels/cpu/gemm_operand_pack.cpp
// Operand preparation of the oneDNN GEMM backend (see gemm_operand_pack.h).
#include "kernels/cpu/gemm_operand_pack.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/gemm_onednn.h"

namespace qsync::gemm_pack {

void transpose_bytes(const void* src, int64_t rows, int64_t cols, int64_t ld, int elem, uint8_t* out) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[size_t((c * rows + r) * elem)], s + (r * ld + c) * elem, size_t(elem));
}

Int8Input int8_input_for_saturating_isa(const GemmOperand& a, int64_t rows, int64_t cols) {
  int max_abs = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (a.int8_unsigned) {
      const uint8_t* p = static_cast<const uint8_t*>(a.data) + r * a.ld;
      for (int64_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, int(p[c]));
    } else {
      const int8_t* p = static_cast<const int8_t*>(a.data) + r * a.ld;
      for (int64_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::abs(int(p[c])));
    }
  }
  if (a.int8_unsigned) return max_abs <= 127 ? Int8Input::AS_IS : Int8Input::DECODE_TO_FP32;
  return max_abs <= INT8_REDUCED_RANGE_MAX ? Int8Input::SHIFT_TO_U8 : Int8Input::DECODE_TO_FP32;
}

void shifted_to_u8(const void* src, int64_t rows, int64_t cols, int64_t ld, bool transpose, uint8_t* out) {
  const auto* s = static_cast<const int8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = s + r * ld;
    if (transpose) {
      for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = uint8_t(int(row[c]) + U8_SHIFT);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = uint8_t(int(row[c]) + U8_SHIFT);  // vectorized
    }
  }
}

}  // namespace qsync::gemm_pack
