// File: kernels/cpu/gemm_int8_slices.cpp
// INT8 products split over the threads as column or K slices (gemm_int8_slices.h).
#include "kernels/cpu/gemm_int8_slices.h"

#include <omp.h>

#include <algorithm>

#include "kernels/cpu/gemm_operand_pack.h"
#include "kernels/cpu/onednn_host.h"

namespace qsync::onednn_matmul {

// INT8 products with few rows and many columns, such as the convolutions' weight gradients in
// int8-all ((out, in * k * k) summed over the batch). oneDNN's own threads split these along K
// or M, each packing a whole operand, so a second thread bought only 1.4-1.6x. Instead each
// thread runs oneDNN alone on its own slice of C's columns. Every entry is still the same exact
// int32 sum under the same epilogue, so the bits do not depend on the split. Each thread packs
// all of A, so a slice pays where A is small beside B: at least 8 columns a row. Two threads,
// medians of 60 calls (AMD EPYC Zen 5), sliced against oneDNN's threads: the CNN's conv2 weight
// gradient (32 x 288 x 1568) 98 -> 81 us on cpu-avx2, 39 -> 27 on cpu-avx512-bf16; 128 x 1024 x
// 784 within 5%; the char-GPT's (128 x 512 x 2048) 2-16% slower sliced, the MLP's (1024 x 1024 x
// 128) up to 1.9x slower: left whole, as are products of under 4 M multiply-adds (the team's
// start costs more than it saves there).
bool column_sliced(const MatmulKey& key) {
  const bool int8 = (key.a_type == dt::s8 || key.a_type == dt::u8) && key.b_type == dt::s8;
  return int8 && key.n >= 8 * key.m && key.m * key.n * key.k >= (int64_t(1) << 22);
}

int column_slices(const MatmulKey& key) {
  if (!column_sliced(key) || omp_in_parallel()) return 1;
  return int(std::clamp<int64_t>(key.n / 64, 1, omp_get_max_threads()));
}

void run_column_slices(const MatmulKey& key, const MatmulOperands& o, int slices) {
  const int64_t width = slice_extent(key.n, slices, 16);  // whole vectors but the last
  run_parts_one_thread_each(slices, [&](int t) {
    const int64_t j0 = t * width;
    if (j0 >= key.n) return;
    MatmulKey slice = key;
    slice.n = std::min(width, key.n - j0);
    slice.one_thread = true;
    run_matmul(slice, o, j0);
  });
}

// INT8 products with a long K: convolutions' weight gradients (summed over a chunk of samples), a
// classifier's first layer. Each thread sums its own slice of K in int32 with oneDNN alone (so
// packs only its share of A and B), the slices are added (exact), and the output scales, per-row
// scales and beta follow here: out = sum * scale(j) (* row scale(i)) (+ beta * out). The path is
// chosen by shape alone and the int32 sums are exact, so the bits do not depend on the thread
// count. Below 4 M multiply-adds the team's start costs more than it saves.
bool k_sliced(const MatmulKey& key) {
  const bool int8 = (key.a_type == dt::s8 || key.a_type == dt::u8) && key.b_type == dt::s8;
  return int8 && !column_sliced(key) && key.k >= 2 * std::max(key.m, key.n) &&
         key.m * key.n * key.k >= (int64_t(1) << 22);
}

namespace {

// Row i of C from the slices' int32 sums (each row of slice 0 takes the others' in place), in
// loops the compiler vectorizes: out = sum * scale(j) (* row scale(i)) (+ beta * out).
void add_slices_and_scale(int32_t* partials, int slices, int64_t m, int64_t n, int64_t i, const SliceEpilogue& e) {
  int32_t* sum = partials + i * n;
  for (int t = 1; t < slices; ++t) {
    const int32_t* part = partials + (t * m + i) * n;
    for (int64_t j = 0; j < n; ++j) sum[j] += part[j];
  }
  const bool per_column = e.scale_mask == 2;
  const float* scales = e.scales;
  const float one_scale = e.scale_mask == 0 ? e.scales[0] : 1.0f;  // 1: no scales (an exact product)
  float* out = e.c + i * e.ldc;
  if (e.row_scales != nullptr) {  // as the whole call's pass after oneDNN (gemm_onednn.cpp)
    const float r = e.row_scales[i];
    for (int64_t j = 0; j < n; ++j)
      out[j] = r * (float(sum[j]) * (per_column ? scales[j] : one_scale)) + (e.beta == 0.0f ? 0.0f : e.beta * out[j]);
  } else if (e.beta != 0.0f) {
    for (int64_t j = 0; j < n; ++j) out[j] = float(sum[j]) * (per_column ? scales[j] : one_scale) + e.beta * out[j];
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = float(sum[j]) * (per_column ? scales[j] : one_scale);
  }
}

}  // namespace

void run_k_slices(const MatmulKey& whole, const MatmulOperands& o, const SliceEpilogue& e) {
  const int64_t m = whole.m, n = whole.n;
  const int slices = omp_in_parallel() ? 1 : int(std::clamp<int64_t>(whole.k / 256, 1, omp_get_max_threads()));
  const int64_t depth = slice_extent(whole.k, slices, 4);  // whole groups of 4 but the last
  // (slices, m, n): each slice's int32 sums
  int32_t* partials = gemm_pack::thread_buffer<int32_t>(gemm_pack::K_PARTIALS, size_t(slices * m * n));
  run_parts_one_thread_each(slices, [&](int t) {
    int32_t* part = partials + t * m * n;
    const int64_t k0 = t * depth;
    if (k0 >= whole.k) {
      std::fill(part, part + m * n, 0);
      return;
    }
    MatmulKey key = whole;
    key.k = std::min(depth, whole.k - k0);
    key.ldc = n;
    key.scale_mask = -1;
    key.beta = 0.0f;
    key.bias = false;
    key.one_thread = true;
    key.c_type = dt::s32;
    MatmulOperands slice = o;
    slice.a = static_cast<const uint8_t*>(o.a) + (key.ta ? k0 * key.lda : k0);
    slice.b = static_cast<const uint8_t*>(o.b) + (key.tb ? k0 : k0 * key.ldb);
    slice.c = part;
    run_matmul(key, slice, 0);
  });
#pragma omp parallel for schedule(static) if (slices > 1)
  for (int64_t i = 0; i < m; ++i) add_slices_and_scale(partials, slices, m, n, i, e);
}

}  // namespace qsync::onednn_matmul
