// File: kernels/cuda/softmax_xent_cuda.cu
// Fused softmax + cross-entropy (see softmax_xent_cuda.h).
#include "kernels/cuda/softmax_xent_cuda.h"

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;
using cuda_launch::block_sum_halving;

constexpr int ROW_THREADS = 256;

__global__ void xent_rows_kernel(const float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                                 float* dlogits, double* row_loss, uint8_t* row_correct) {
  __shared__ float best_value[ROW_THREADS];
  __shared__ int64_t best_index[ROW_THREADS];
  __shared__ double scratch[ROW_THREADS];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * V;
    float* grow = dlogits + r * V;
    // Argmax, first maximum on ties: (value, index) pairs, larger value or equal value and
    // smaller index wins; every thread starts from its first element.
    float bv = -INFINITY;
    int64_t bi = -1;
    for (int64_t v = threadIdx.x; v < V; v += ROW_THREADS)
      if (bi < 0 || row[v] > bv) bv = row[v], bi = v;
    best_value[threadIdx.x] = bv;
    best_index[threadIdx.x] = bi;
    __syncthreads();
    for (int half = ROW_THREADS / 2; half >= 1; half /= 2) {
      if (int(threadIdx.x) < half) {
        const float ov = best_value[threadIdx.x + half];
        const int64_t oi = best_index[threadIdx.x + half];
        const float mv = best_value[threadIdx.x];
        const int64_t mi = best_index[threadIdx.x];
        if (oi >= 0 && (mi < 0 || ov > mv || (ov == mv && oi < mi))) {
          best_value[threadIdx.x] = ov;
          best_index[threadIdx.x] = oi;
        }
      }
      __syncthreads();
    }
    const float maxv = best_value[0];
    const int64_t argmax = best_index[0];
    __syncthreads();
    double sum = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += ROW_THREADS) {
      const float e = expf(row[v] - maxv);
      grow[v] = e;
      sum += double(e);
    }
    sum = block_sum_halving<double, ROW_THREADS>(sum, scratch);
    const int32_t target = targets[r];
    const float inv_sum = float(1.0 / sum);
    for (int64_t v = threadIdx.x; v < V; v += ROW_THREADS) {
      const float g = __fmul_rn(__fmul_rn(grow[v], inv_sum), scale);
      grow[v] = v == target ? __fsub_rn(g, scale) : g;
    }
    if (threadIdx.x == 0) {
      row_loss[r] = log(sum) - double(row[target] - maxv);
      row_correct[r] = argmax == target ? 1 : 0;
    }
    __syncthreads();
  }
}

constexpr int SUM_THREADS = 1024;

// One block: thread t sums rows t, t + 1024, ... in order, then the halving tree.
__global__ void xent_sums_kernel(const double* row_loss, const uint8_t* row_correct, int64_t rows, double* loss_sum,
                                 long long* correct) {
  __shared__ double scratch[SUM_THREADS];
  __shared__ long long hits[SUM_THREADS];
  double s = 0.0;
  long long c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += SUM_THREADS) {
    s += row_loss[r];
    c += row_correct[r];
  }
  s = block_sum_halving<double, SUM_THREADS>(s, scratch);
  c = block_sum_halving<long long, SUM_THREADS>(c, hits);
  if (threadIdx.x == 0) {
    *loss_sum = s;
    *correct = c;
  }
}

}  // namespace

void softmax_xent_rows_cuda(const float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                            float* dlogits, double* row_loss, uint8_t* row_correct, void* stream) {
  if (rows <= 0 || V <= 0) return;
  xent_rows_kernel<<<unsigned(std::min<int64_t>(rows, cuda_launch::MAX_BLOCKS)), ROW_THREADS, 0, as_stream(stream)>>>(
      logits, targets, rows, V, scale, dlogits, row_loss, row_correct);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

void softmax_xent_sums_cuda(const double* row_loss, const uint8_t* row_correct, int64_t rows, double* loss_sum,
                            long long* correct, void* stream) {
  xent_sums_kernel<<<1, SUM_THREADS, 0, as_stream(stream)>>>(row_loss, row_correct, rows, loss_sum, correct);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qsync
