// File: kernels/cpu/gemm_onednn.cpp
// The oneDNN ("cpu") GEMM backend. Each distinct signature gets one matmul primitive, cached.
// Transposes are expressed as memory strides; when oneDNN has only its slow reference kernel
// for a layout (int8 with a transposed A, say), the operand is repacked into a layout it runs
// natively. Precisions without a native kernel are decoded to FP32 first ("emulated"). INT8
// products with few rows and many columns, or a long K, run as slices, one oneDNN call per
// thread (gemm_int8_slices.h); so do large FP32 and BF16 products, over C's rows or columns
// (gemm_float_slices.h).
#include "kernels/cpu/gemm_onednn.h"

#include <omp.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cpu/gemm_float_slices.h"
#include "kernels/cpu/gemm_int8_slices.h"
#include "kernels/cpu/gemm_operand_pack.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu_isa.h"

namespace qsync {
namespace {

using namespace gemm_pack;
using namespace onednn_matmul;

// The oneDNN data type an operand is handed over in, when oneDNN computes it natively.
dt native_type(Precision p, bool int8_unsigned) {
  switch (p) {
    case Precision::FP32: return dt::f32;
    case Precision::BF16: return dt::bf16;
    case Precision::FP16: return dt::f16;
    case Precision::INT8: return int8_unsigned ? dt::u8 : dt::s8;
    default: return dt::undef;  // TF32, FP8: always through FP32
  }
}

// How a signature will run: the oneDNN types, which operands to repack to which transpose,
// and whether it is native.
struct Route {
  dt a_type = dt::f32, b_type = dt::f32;
  bool ta = false, tb = false;  // the layouts handed to oneDNN (repack when they differ)
  bool emulated = true;
  std::string impl;
};

Route route_for(const GemmSignature& s) {
  const bool ta = s.a_trans == Transpose::YES, tb = s.b_trans == Transpose::YES;
  const dt at = native_type(s.a_precision, s.a_int8_unsigned), bt = native_type(s.b_precision, false);
  // oneDNN's BF16 on AVX-512 CPUs without BF16 instructions is a slow JIT emulation; decoding to
  // FP32 (exact) and running the FP32 kernel is several times faster.
  const bool bf16_emulated = s.a_precision == Precision::BF16 && cpu_isa_active() < CpuIsa::AVX512_BF16;
  if (at != dt::undef && bt != dt::undef && !bf16_emulated) {
    // Try the requested layout first, then layouts that need one or both operands repacked.
    const std::pair<bool, bool> layouts[] = {{ta, tb}, {false, tb}, {ta, !tb}, {false, !tb}};
    for (const auto& [la, lb] : layouts) {
      const MatmulKey probe{at, bt, 64, 64, 64, la, lb, 64, 64, 64, 0, 0.0f};
      const std::string impl = matmul_cached(probe).impl;
      if (!is_ref_impl(impl)) return Route{at, bt, la, lb, false, impl};
    }
  }
  // Emulated: decode to FP32 (packed in the requested layout) and run the FP32 kernel.
  const MatmulKey probe{dt::f32, dt::f32, 64, 64, 64, ta, tb, 64, 64, 64, 0, 0.0f};
  return Route{dt::f32, dt::f32, ta, tb, true, "fp32 " + matmul_cached(probe).impl};
}

// A route decided per precision pair and layout, once.
const Route& route_cached(const GemmSignature& s) {
  static std::mutex mutex;
  static std::map<std::tuple<Precision, Precision, bool, bool, bool>, Route> cache;
  const auto key = std::make_tuple(s.a_precision, s.b_precision, s.a_trans == Transpose::YES,
                                   s.b_trans == Transpose::YES, s.a_int8_unsigned);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Route r = route_for(s);
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(r)).first->second;
}

class GemmBackendOnednn final : public GemmBackend {
 public:
  const char* name() const override { return "cpu"; }

  GemmSupport supports(const GemmSignature& s) const override {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0) return {SupportLevel::UNSUPPORTED, "sizes must be positive"};
    const Route& r = route_cached(s);
    if (!r.emulated) return {SupportLevel::NATIVE, "oneDNN " + r.impl};
    return {SupportLevel::EMULATED, std::string(precision_name(s.a_precision)) + " decoded to fp32, oneDNN " + r.impl};
  }

  void gemm(const GemmDesc& in) const override {
    const GemmDesc d = gemm_resolve(in);
    const GemmSignature s = gemm_signature(d);
    const Route& r = route_cached(s);
    const bool ta = d.a.trans == Transpose::YES, tb = d.b.trans == Transpose::YES;

    // Without VNNI, oneDNN's INT8 kernels multiply u8 x s8 pairs into saturating int16
    // (vpmaddubsw): exact only while |a| <= 127 as u8. Signed A within [-63, 63] (7-bit,
    // "reduce_range" quantization) is handed over as u8 = a + 64 with a source zero point of
    // 64; wider A is computed exactly through FP32 instead.
    Int8Input int8_input = Int8Input::AS_IS;
    if (!r.emulated && d.a.precision == Precision::INT8 && cpu_isa_active() < CpuIsa::AVX512)
      int8_input = int8_input_for_saturating_isa(d.a, ta ? d.k : d.m, ta ? d.m : d.k);
    const bool emulated = r.emulated || int8_input == Int8Input::DECODE_TO_FP32;

    // Operand buffers as handed to oneDNN.
    const void* a_ptr = d.a.data;
    const void* b_ptr = d.b.data;
    int64_t lda = d.a.ld, ldb = d.b.ld;
    const int64_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;  // stored shape
    const int64_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
    bool route_ta = r.ta, route_tb = r.tb;
    if (emulated) {
      float* a_fp32 = thread_buffer<float>(A_FP32, size_t(a_rows * a_cols));
      float* b_fp32 = thread_buffer<float>(B_FP32, size_t(b_rows * b_cols));
      gemm_operand_to_fp32(d.a, a_rows, a_cols, a_fp32);
      gemm_operand_to_fp32(d.b, b_rows, b_cols, b_fp32);
      a_ptr = a_fp32;
      b_ptr = b_fp32;
      lda = a_cols;
      ldb = b_cols;
      route_ta = ta;
      route_tb = tb;
    } else {
      const int a_elem = precision_bytes(d.a.precision), b_elem = precision_bytes(d.b.precision);
      if (int8_input == Int8Input::SHIFT_TO_U8) {
        uint8_t* a_packed = thread_buffer<uint8_t>(A_PACKED, size_t(a_rows * a_cols));
        shifted_to_u8(d.a.data, a_rows, a_cols, d.a.ld, r.ta != ta, a_packed);
        a_ptr = a_packed;
        lda = r.ta != ta ? a_rows : a_cols;
      } else if (r.ta != ta) {
        uint8_t* a_packed = thread_buffer<uint8_t>(A_PACKED, size_t(a_rows * a_cols * a_elem));
        transpose_bytes(d.a.data, a_rows, a_cols, d.a.ld, a_elem, a_packed);
        a_ptr = a_packed;
        lda = a_rows;
      }
      if (r.tb != tb) {
        uint8_t* b_packed = thread_buffer<uint8_t>(B_PACKED, size_t(b_rows * b_cols * b_elem));
        transpose_bytes(d.b.data, b_rows, b_cols, d.b.ld, b_elem, b_packed);
        b_ptr = b_packed;
        ldb = b_rows;
      }
    }
    const dt a_type = emulated ? dt::f32 : int8_input == Int8Input::SHIFT_TO_U8 ? dt::u8 : r.a_type;
    const dt b_type = emulated ? dt::f32 : r.b_type;

    // Output scales: sa * sb(j). Per-row A scales are applied after the GEMM.
    const bool a_per_row = d.a.scale_mode == ScaleMode::PER_CHANNEL;
    const float sa = d.a.scale_mode == ScaleMode::PER_TENSOR ? d.a.scales[0] : 1.0f;
    float* scales = nullptr;
    int mask = -1;
    if (d.b.scale_mode == ScaleMode::PER_CHANNEL) {
      mask = 2;
      scales = thread_buffer<float>(SCALES, size_t(d.n));
      for (int64_t j = 0; j < d.n; ++j) scales[j] = sa * d.b.scales[j];
    } else if (d.a.scale_mode != ScaleMode::NONE || d.b.scale_mode != ScaleMode::NONE) {
      mask = 0;
      scales = thread_buffer<float>(SCALES, 1);
      scales[0] = sa * (d.b.scale_mode == ScaleMode::PER_TENSOR ? d.b.scales[0] : 1.0f);
    }
    // With per-row A scales, beta must be applied after them: compute into a scratch C.
    float* c_scratch = nullptr;
    float* c_ptr = d.c;
    int64_t ldc = d.ldc;
    float beta = d.beta;
    if (a_per_row) {
      c_scratch = thread_buffer<float>(C_SCRATCH, size_t(d.m * d.n));
      c_ptr = c_scratch;
      ldc = d.n;
      beta = 0.0f;
    }

    const bool zero_point = int8_input == Int8Input::SHIFT_TO_U8;
    // The bias rides in oneDNN's epilogue where it is the same single FP32 add as the pass after
    // (acc + bias[j]): no output scales (they would scale the bias too) and no beta (the sum
    // post-op comes after the bias, another order of adds).
    MatmulKey key{a_type, b_type, d.m, d.n, d.k, route_ta, route_tb, lda, ldb, ldc, mask, beta, zero_point};
    // Called inside a team's parallel region (a thread's own share of an op): one thread's primitive.
    key.one_thread = omp_in_parallel() != 0;
    if (d.bias != nullptr && mask < 0 && !a_per_row && beta == 0.0f) {
      key.bias = true;  // unless oneDNN has only its reference kernel with a bias here
      if (is_ref_impl(matmul_cached(key).impl)) key.bias = false;
    }
    const bool bias_fused = key.bias;
    const int b_elem = emulated ? 4 : precision_bytes(d.b.precision);
    const MatmulOperands operands{a_ptr, b_ptr, b_elem, c_ptr, d.bias, scales, precision_name(d.a.precision)};
    if (k_sliced(key)) {  // scales, per-row scales and beta applied with the slices' sum
      run_k_slices(key, operands, {scales, mask, a_per_row ? d.a.scales : nullptr, d.beta, d.c, d.ldc});
      gemm_add_bias_rows(d);  // never fused into a slice
      return;
    }
    const int slices = column_slices(key);
    const FloatSlices float_split = float_slices(key, omp_in_parallel() ? 1 : omp_get_max_threads());
    if (float_split.count > 1) {
      run_float_slices(key, operands, float_split);
    } else if (slices > 1) {
      run_column_slices(key, operands, slices);
    } else {
      run_matmul(key, operands, 0);
    }

    if (a_per_row) {
      for (int64_t i = 0; i < d.m; ++i) {
        const float s_i = d.a.scales[i];
        float* out = d.c + i * d.ldc;
        const float* tmp = c_scratch + i * d.n;
        for (int64_t j = 0; j < d.n; ++j) out[j] = s_i * tmp[j] + (d.beta == 0.0f ? 0.0f : d.beta * out[j]);
      }
    }
    if (!bias_fused) gemm_add_bias_rows(d);
  }
};

}  // namespace

const GemmBackend* gemm_backend_cpu() {
  static const GemmBackendOnednn backend;
  return &backend;
}

int cpu_int8_activation_max() { return cpu_isa_active() >= CpuIsa::AVX512 ? 127 : INT8_REDUCED_RANGE_MAX; }

std::string onednn_matmul_impl(Precision p) {
  const dt t = native_type(p, false);
  if (t == dt::undef) return "";
  const MatmulKey probe{t, t, 64, 64, 64, false, true, 64, 64, 64, 0, 0.0f};
  const std::string impl = matmul_cached(probe).impl;
  return impl;
}

}  // namespace qsync
