// File: kernels/cpu/gemm_float_slices.cpp
// FP32 and BF16 products split over the threads as row, column or depth slices
// (gemm_float_slices.h).
#include "kernels/cpu/gemm_float_slices.h"

#include <algorithm>

#include "kernels/cpu/gemm_int8_slices.h"
#include "kernels/cpu/gemm_operand_pack.h"
#include "kernels/cpu/onednn_host.h"

namespace qsync::onednn_matmul {

// On two threads oneDNN's own split of these products bought little: the char-GPT's BF16 weight
// gradients (128 x 512 x 2048, transposed A) ran 1.27x faster than on one thread, its FP32
// forwards (2048 x 512 x 128) 1.76x. Two single-threaded calls, each over half of C, took the
// char-GPT's int8 step (BF16 backward) 23.85 -> 22.49 ms and its FP32 step 34.71 -> 33.21 (AMD
// EPYC Zen 5, 2 threads, medians of 3 interleaved runs). Each call packs the operand it does not
// slice whole, so the slices pay where the product is big enough to hide that: at least 4 M
// multiply-adds. FP32 only along rows with A as stored: a single-threaded FP32 call with a
// transposed A takes oneDNN's older GEMM kernel, up to 7x slower on a slice 64 columns wide, and
// column slices of the MLP's (128 x 1024 x 784) were 1.3% slower on AVX2.
//
// Depth slices: a long K beside C (k >= 2 max(m, n)) is a weight gradient, dW = dy^T x summed over
// the batch's rows. Its operands were written a row per thread by the ops before (the gradient's
// cast, the saved input's), so slices of C's rows or columns make each thread read the other
// core's half of both, at a third of the speed on this machine's two cores. A slice of K reads
// only its own rows; the FP32 partials (m x n, small beside the operands) are added after. A
// depth slice of a transposed A is a block of its stored rows (lda = m, as the whole call's):
// single-threaded FP32 runs those at the whole call's speed per thread (115 GMAC/s on 96-512 x
// 64-512 x 1024; the slow kernel above takes the row slices' strided A).
FloatSlices float_slices(const MatmulKey& key, int threads) {
  const bool bf16 = key.a_type == dt::bf16 && key.b_type == dt::bf16;
  const bool fp32 = key.a_type == dt::f32 && key.b_type == dt::f32;
  if (threads < 2 || (!bf16 && !fp32) || key.c_type != dt::f32 || key.m * key.n * key.k < (int64_t(1) << 22))
    return {};
  if (key.k >= 2 * std::max(key.m, key.n) && !key.bias && key.scale_mask < 0) {
    const int count = int(std::min<int64_t>(threads, key.k / 256));
    if (count >= 2) return {count, FloatSlices::Side::DEPTH};
  }
  const bool rows = key.m >= key.n;
  if (fp32 && (key.ta || !rows)) return {};
  const int64_t side = rows ? key.m : key.n;
  const int count = int(std::min<int64_t>(threads, (side + 15) / 16));  // whole vectors but the last
  if (count < 2) return {};
  return {count, rows ? FloatSlices::Side::ROWS : FloatSlices::Side::COLUMNS};
}

namespace {

int64_t float_bytes(dt type) { return type == dt::bf16 ? 2 : 4; }  // BF16 or FP32

void run_row_slices(const MatmulKey& key, const MatmulOperands& o, int count) {
  const int64_t width = slice_extent(key.m, count, 16);  // as the column slices
  const int64_t a_elem = float_bytes(key.a_type);
  run_parts_one_thread_each(count, [&](int t) {
    const int64_t begin = t * width;
    if (begin >= key.m) return;
    MatmulKey slice = key;
    slice.one_thread = true;
    slice.m = std::min(width, key.m - begin);
    MatmulOperands part = o;  // rows [begin, begin + m) of op(A) and of C; B, the bias and scales whole
    part.a = static_cast<const uint8_t*>(o.a) + begin * (key.ta ? 1 : key.lda) * a_elem;
    part.c = static_cast<uint8_t*>(o.c) + begin * key.ldc * int64_t(sizeof(float));
    run_matmul(slice, part, 0);
  });
}

// Slice 0 writes C itself (beta * C + its sums), the others FP32 partials (m, n); then each row of
// C takes the partials in slice order.
void run_depth_slices(const MatmulKey& key, const MatmulOperands& o, int count) {
  const int64_t m = key.m, n = key.n;
  const int64_t depth = slice_extent(key.k, count, 16);
  const int64_t a_elem = float_bytes(key.a_type);
  float* partials = gemm_pack::thread_buffer<float>(gemm_pack::K_PARTIALS, size_t((count - 1) * m * n));
  run_parts_one_thread_each(count, [&](int t) {
    const int64_t k0 = t * depth;
    float* part = t == 0 ? static_cast<float*>(o.c) : partials + (t - 1) * m * n;
    MatmulKey slice = key;
    slice.one_thread = true;
    if (k0 >= key.k) {  // nothing left for this slice (a short K on many threads)
      if (t > 0) std::fill(part, part + m * n, 0.0f);
      return;
    }
    slice.k = std::min(depth, key.k - k0);
    if (t > 0) {
      slice.ldc = n;
      slice.beta = 0.0f;
    }
    MatmulOperands s = o;  // columns [k0, k0 + k) of op(A), rows of op(B)
    s.a = static_cast<const uint8_t*>(o.a) + (key.ta ? k0 * key.lda : k0) * a_elem;
    s.b = static_cast<const uint8_t*>(o.b) + (key.tb ? k0 : k0 * key.ldb) * o.b_elem;
    s.c = part;
    run_matmul(slice, s, 0);
  });
  float* c = static_cast<float*>(o.c);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i)
    for (int t = 1; t < count; ++t) {
      const float* part = partials + (t - 1) * m * n + i * n;
      for (int64_t j = 0; j < n; ++j) c[i * key.ldc + j] += part[j];
    }
}

}  // namespace

void run_float_slices(const MatmulKey& key, const MatmulOperands& o, const FloatSlices& s) {
  switch (s.side) {
    case FloatSlices::Side::ROWS: return run_row_slices(key, o, s.count);
    case FloatSlices::Side::COLUMNS: return run_column_slices(key, o, s.count);
    case FloatSlices::Side::DEPTH: return run_depth_slices(key, o, s.count);
  }
}

}  // namespace qsync::onednn_matmul
