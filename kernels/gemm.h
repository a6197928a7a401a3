// File: kernels/gemm.h
// The GEMM backend interface: a name, a capability query, and the call. Backends (ref, cpu on
// oneDNN, cuda on cuBLASLt) are listed in one registry (gemm_registry.h).
//
// Semantics (row-major, FP32 output, FP32-or-wider accumulation):
//   C[i, j] = sa(i) * sb(j) * sum_k opA[i, k] * opB[k, j] + beta * C[i, j]  (+ bias[j], after)
// where opA is (m, k) and opB is (k, n):
//   a.trans == NO : A stored (m, k), lda >= k      a.trans == YES : A stored (k, m), lda >= m
//   b.trans == NO : B stored (k, n), ldb >= n      b.trans == YES : B stored (n, k), ldb >= k
// The three cases training needs:
//   forward          Y  = X  * W^T : a = X  (M, K) NO,  b = W (N, K) YES
//   input gradient   dX = dY * W   : a = dY (M, N) NO,  b = W (N, K) NO
//   weight gradient  dW = dY^T * X : a = dY (M, N) YES, b = X (M, K) NO
// sa/sb are the operands' scales (INT8, FP8): per tensor (one value) or per channel (sa per
// row i of opA, sb per column j of opB: the per-output-channel weight scale of the forward).
// Floating-point operands with no scales use sa = sb = 1.
// All pointers, scales included, live in the backend's memory space (host for ref/cpu,
// device for cuda).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/precision.h"

namespace qsync {

enum class Transpose : uint8_t { NO, YES };
enum class ScaleMode : uint8_t { NONE, PER_TENSOR, PER_CHANNEL };

struct GemmOperand {
  const void* data = nullptr;
  Precision precision = Precision::FP32;
  Transpose trans = Transpose::NO;
  int64_t ld = 0;                 // leading dimension of the stored matrix, in elements (0: packed)
  ScaleMode scale_mode = ScaleMode::NONE;
  const float* scales = nullptr;  // 1 value (PER_TENSOR), m (A) or n (B) values (PER_CHANNEL)
  bool int8_unsigned = false;     // INT8 data is uint8 in [0, 255] (post-ReLU activations, u8s8)
};

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  float* c = nullptr;  // (m, n) row-major FP32
  int64_t ldc = 0;  // 0: packed (n)
  float beta = 0.0f;
  // (n) FP32 or nullptr: C[i, j] += bias[j] once the product and beta are in, one FP32 add (a
  // backend that fuses it into its epilogue must round the same way, or add it afterwards).
  const float* bias = nullptr;
};

// What a backend is asked before a call: the precision pair, the shape and the layouts.
struct GemmSignature {
  Precision a_precision = Precision::FP32, b_precision = Precision::FP32;
  int64_t m = 0, n = 0, k = 0;
  Transpose a_trans = Transpose::NO, b_trans = Transpose::NO;
  int64_t lda = 0, ldb = 0, ldc = 0;  // 0: packed (the smallest legal value)
  bool a_int8_unsigned = false;
};
GemmSignature gemm_signature(const GemmDesc& d);

enum class SupportLevel : uint8_t {
  NATIVE,       // the hardware computes in this precision
  EMULATED,     // numerically this precision, computed through conversion to a wider one
  UNSUPPORTED,
};
const char* support_level_name(SupportLevel s);

struct GemmSupport {
  SupportLevel level = SupportLevel::UNSUPPORTED;
  std::string detail;  // the implementation used, or why it is unsupported
  bool ok() const { return level != SupportLevel::UNSUPPORTED; }
};

// Bad input (shape mismatch, unsupported precision, misaligned operand): the message names
// the problem and what to change.
class GemmError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual const char* name() const = 0;
  // Whether `gemm` accepts this signature, and how (native or emulated).
  virtual GemmSupport supports(const GemmSignature& s) const = 0;
  // Runs the GEMM; throws GemmError on a signature `supports` rejects or on invalid arguments.
  virtual void gemm(const GemmDesc& d) const = 0;
};

// Checks what every backend requires (positive sizes, leading dimensions, scales present for
// INT8/FP8, a == b precision class); throws GemmError naming the first problem.
// gemm_resolve also fills leading dimensions given as 0 with the packed value.
GemmDesc gemm_resolve(const GemmDesc& d);
void gemm_validate(const GemmDesc& d);

// The bias epilogue as a pass of its own: C[i, j] += d.bias[j] (nothing without a bias). For
// host backends that cannot fuse it exactly.
void gemm_add_bias_rows(const GemmDesc& d);

// Decodes an operand's stored matrix (stored_rows, stored_cols; row stride o.ld) into a packed
// FP32 buffer (stored_rows * stored_cols), without applying scales: INT8 gives its integers, TF32
// rounds to 10 mantissa bits, BF16/FP16/FP8 decode exactly. Vectorized for BF16/FP16.
void gemm_operand_to_fp32(const GemmOperand& o, int64_t stored_rows, int64_t stored_cols, float* out);

// Multiply-accumulate count, 2*m*n*k, for GFLOP/s figures.
inline double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * double(m) * double(n) * double(k); }

}  // namespace qsync
