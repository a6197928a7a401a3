// File: kernels/cpu/gemm_float_slices.cpp
// FP32 and BF16 products split over the threads as row or column slices (gemm_float_slices.h).
#include "kernels/cpu/gemm_float_slices.h"

#include <algorithm>

#include "kernels/cpu/gemm_int8_slices.h"
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
OutputSlices float_output_slices(const MatmulKey& key, int threads) {
  const bool bf16 = key.a_type == dt::bf16 && key.b_type == dt::bf16;
  const bool fp32 = key.a_type == dt::f32 && key.b_type == dt::f32;
  if (threads < 2 || (!bf16 && !fp32) || key.c_type != dt::f32 || key.m * key.n * key.k < (int64_t(1) << 22))
    return {};
  const bool rows = key.m >= key.n;
  if (fp32 && (key.ta || !rows)) return {};
  const int64_t side = rows ? key.m : key.n;
  const int count = int(std::min<int64_t>(threads, (side + 15) / 16));  // whole vectors but the last
  if (count < 2) return {};
  return {count, rows};
}

void run_output_slices(const MatmulKey& key, const MatmulOperands& o, const OutputSlices& s) {
  if (!s.rows) return run_column_slices(key, o, s.count);
  const int64_t width = ((key.m + s.count - 1) / s.count + 15) / 16 * 16;  // as the column slices
  const int64_t a_elem = key.a_type == dt::bf16 ? 2 : 4;
  run_parts_one_thread_each(s.count, [&](int t) {
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

}  // namespace qsync::onednn_matmul
