// File: kernels/cpu/gemm_operand_pack.h
// Operand preparation of the oneDNN GEMM backend (gemm_onednn.cpp): per-thread reusable
// buffers, repacking a stored matrix into the other layout, and how INT8 A reaches oneDNN on
// CPUs without VNNI (whose u8 x s8 products saturate in int16).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/onednn_host.h"
#include "kernels/gemm.h"

namespace qsync::gemm_pack {

// This thread's buffer of one role, grown to the largest request and reused: the per-call
// operand copies touch no fresh pages (and zero nothing) in the steady state.
enum BufferRole { A_FP32, B_FP32, A_PACKED, B_PACKED, C_SCRATCH, SCALES, K_PARTIALS, BUFFER_ROLES };
template <class T>
T* thread_buffer(BufferRole role, size_t count) {
  thread_local GrowingBuffer buffers[BUFFER_ROLES];
  return static_cast<T*>(buffers[role].get(count * sizeof(T)));
}

// Copies a stored matrix into the other layout: (rows, cols) with stride ld -> (cols, rows) packed.
void transpose_bytes(const void* src, int64_t rows, int64_t cols, int64_t ld, int elem, uint8_t* out);

// How INT8 A reaches oneDNN on CPUs without VNNI: as it is (u8 within 127), as u8 = s8 + 64
// with a source zero point of 64 (s8 within the 7-bit reduced range), or decoded to FP32.
enum class Int8Input { AS_IS, SHIFT_TO_U8, DECODE_TO_FP32 };
inline constexpr int32_t U8_SHIFT = 64;

// Which of the three the stored A (rows, cols) takes, from its largest |value|.
Int8Input int8_input_for_saturating_isa(const GemmOperand& a, int64_t rows, int64_t cols);

// s8 (rows, cols) with stride ld -> packed u8 = s8 + 64, transposed when `transpose`.
void shifted_to_u8(const void* src, int64_t rows, int64_t cols, int64_t ld, bool transpose, uint8_t* out);

}  // namespace qsync::gemm_pack
