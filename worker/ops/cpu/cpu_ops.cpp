// File: worker/ops/cpu/cpu_ops.cpp
// CpuOps: memory, timing and the tensor matmul on the host GEMM backends; the canonical sum of
// squares; the process-wide instance.
#include "worker/ops/cpu_ops.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/gemm_registry.h"
#include "worker/layer.h"
#include "worker/ops/cpu/cpu_kernels.h"

namespace qsync {
namespace {

void require_host(const Tensor& t, const char* op) {
  if (!t.on_host())
    throw std::logic_error(std::string("cpu ") + op + ": a tensor lives on " + t.device().name() +
                           ": a rank computes on one device (use that device's ops)");
}

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.shape().back(); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.shape().back(); }

}  // namespace

DeviceOps& cpu_ops() {
  static CpuOps ops;
  return ops;
}

void CpuOps::fill_zero(Tensor& t) {
  require_host(t, "fill_zero");
  std::memset(t.data(), 0, size_t(t.bytes()));
}

void CpuOps::copy(const Tensor& src, Tensor& dst) {
  require_host(src, "copy");
  require_host(dst, "copy");
  if (src.bytes() != dst.bytes())
    throw std::invalid_argument("copy: " + std::to_string(src.bytes()) + " bytes into a tensor of " +
                                std::to_string(dst.bytes()));
  // Pieces of 256 KiB, in parallel past 1 MiB (two threads' bandwidth on a large copy).
  constexpr int64_t PIECE = int64_t{256} << 10;
  const int64_t bytes = src.bytes(), pieces = (bytes + PIECE - 1) / PIECE;
  const auto* from = static_cast<const char*>(src.data());
  auto* to = static_cast<char*>(dst.data());
#pragma omp parallel for schedule(static) if (bytes > 4 * PIECE)
  for (int64_t k = 0; k < pieces; ++k)
    std::memcpy(to + k * PIECE, from + k * PIECE, size_t(std::min(PIECE, bytes - k * PIECE)));
}

int CpuOps::int8_a_operand_max() const { return cpu_int8_activation_max(); }

TimeMark CpuOps::time_mark() {
  return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(), -1};
}

void CpuOps::record_time(OpTimer& timer, const std::string& op, const TimeMark& start, const TimeMark& end) {
  timer.record(op, end.host_seconds - start.host_seconds);
}

void CpuOps::matmul(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, Tensor& c, const MatmulOptions& o) {
  require_host(a, "matmul");
  require_host(b, "matmul");
  const int64_t ra = rows_of(a), ca = cols_of(a), rb = rows_of(b), cb = cols_of(b);
  const bool a_t = ta == Transpose::YES, b_t = tb == Transpose::YES;
  GemmDesc d;
  d.m = a_t ? ca : ra;
  d.k = a_t ? ra : ca;
  d.n = b_t ? rb : cb;
  const int64_t kb = b_t ? cb : rb;
  if (kb != d.k)
    throw std::invalid_argument("matmul: inner dimensions differ: op(a) is (" + std::to_string(d.m) + ", " +
                                std::to_string(d.k) + "), op(b) has " + std::to_string(kb) + " rows");
  if (c.numel() != d.m * d.n)
    throw std::invalid_argument("matmul: c holds " + std::to_string(c.numel()) + " values for a (" +
                                std::to_string(d.m) + ", " + std::to_string(d.n) + ") product");
  auto operand = [](const Tensor& t, Transpose tr, bool channel_ok) {
    GemmOperand op{t.data(), t.precision(), tr, cols_of(t), t.scale_mode, t.scale_data()};
    if (t.scale_mode == ScaleMode::PER_CHANNEL && !channel_ok)
      throw std::logic_error("matmul: per-channel scales must lie along the output (rows of op(a), columns of op(b))");
    return op;
  };
  d.a = operand(a, ta, !a_t);
  d.b = operand(b, tb, b_t);
  d.c = c.f32();
  d.ldc = d.n;
  d.beta = o.beta;
  if (o.bias != nullptr) d.bias = o.bias->f32();  // y (m, n) += b[j], after the product
  gemm_backend_for_host(gemm_signature(d)).gemm(d);
  if (o.row_sums_of_a != nullptr) {  // sums[i] += sum_k op(a)[i, k]
    if (a.precision() != Precision::FP32 && a.precision() != Precision::TF32)
      throw std::logic_error("matmul: row sums of an A operand in " + std::string(precision_name(a.precision())) +
                             " (they are taken from FP32 data only)");
    float* sums = o.row_sums_of_a->f32();
    const float* ap = a.as<float>();
    // A transposed: column sums of the stored A (kernels/column_sum_order.h); else each stored
    // row in order. The same sums at any thread count.
    if (a_t) {
      add_column_sums(ap, ra, ca, sums);
    } else {
#pragma omp parallel for if (ra * ca > (1 << 16))
      for (int64_t i = 0; i < ra; ++i) {
        float s = sums[i];
        for (int64_t k = 0; k < ca; ++k) s += ap[i * ca + k];
        sums[i] = s;
      }
    }
  }
}

double canonical_sum_of_squares(const float* g, int64_t n) {
  constexpr int64_t B = CANONICAL_SUM_BLOCK;
  if (n <= 0) return 0.0;
  // Level 0: the squares, block by block.
  std::vector<double> level(size_t((n + B - 1) / B));
  double v[B];
  for (size_t blk = 0; blk < level.size(); ++blk) {
    const int64_t begin = int64_t(blk) * B, len = std::min(B, n - begin);
    for (int64_t i = 0; i < B; ++i) v[i] = i < len ? double(g[begin + i]) * double(g[begin + i]) : 0.0;
    for (int64_t half = B / 2; half >= 1; half /= 2)
      for (int64_t i = 0; i < half; ++i) v[i] += v[i + half];
    level[blk] = v[0];
  }
  // Higher levels: groups of B partial sums, the same halving tree.
  while (level.size() > 1) {
    std::vector<double> next((level.size() + size_t(B) - 1) / size_t(B));
    for (size_t grp = 0; grp < next.size(); ++grp) {
      const size_t begin = grp * size_t(B);
      for (int64_t i = 0; i < B; ++i) v[i] = begin + size_t(i) < level.size() ? level[begin + size_t(i)] : 0.0;
      for (int64_t half = B / 2; half >= 1; half /= 2)
        for (int64_t i = 0; i < half; ++i) v[i] += v[i + half];
      next[grp] = v[0];
    }
    level.swap(next);
  }
  return level[0];
}

}  // namespace qsync
