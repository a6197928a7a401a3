// File: kernels/cuda/attention_cuda.cu
// Head moves and the row softmax of attention (see attention_cuda.h): one warp per row.
#include "kernels/cuda/attention_cuda.h"

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;
using cuda_launch::launch_elementwise;

struct SplitHeads {
  const float* qkv; float* q; float* k; float* v; int64_t tokens, heads, hs;
  __device__ void operator()(int64_t i) const {  // i over (b, h, t, j)
    const int64_t j = i % hs, t = (i / hs) % tokens, h = (i / (hs * tokens)) % heads, b = i / (hs * tokens * heads);
    const int64_t C = heads * hs;
    const float* row = qkv + (b * tokens + t) * 3 * C + h * hs + j;
    if (q != nullptr) q[i] = row[0];
    if (k != nullptr) k[i] = row[C];
    if (v != nullptr) v[i] = row[2 * C];
  }
};
struct SplitPart {
  const float* src; float* o; int64_t tokens, heads, hs, row_width; int part;
  __device__ void operator()(int64_t i) const {  // i over (b, h, t, j)
    const int64_t j = i % hs, t = (i / hs) % tokens, h = (i / (hs * tokens)) % heads, b = i / (hs * tokens * heads);
    o[i] = src[(b * tokens + t) * row_width + part * heads * hs + h * hs + j];
  }
};
struct MergeHeads {
  const float* o; float* out; int64_t tokens, heads, hs, row_width; int part;
  __device__ void operator()(int64_t i) const {  // i over (b, h, t, j)
    const int64_t j = i % hs, t = (i / hs) % tokens, h = (i / (hs * tokens)) % heads, b = i / (hs * tokens * heads);
    const int64_t C = heads * hs;
    out[(b * tokens + t) * row_width + part * C + h * hs + j] = o[i];
  }
};

constexpr int WARPS = 8;

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void softmax_forward_kernel(float* s, int64_t rows, int64_t tokens, float scale, bool causal) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t(blockIdx.x) * WARPS + threadIdx.x / 32; r < rows; r += int64_t(gridDim.x) * WARPS) {
    float* row = s + r * tokens;
    const int64_t visible = causal ? r % tokens + 1 : tokens;
    float m = -INFINITY;
    for (int64_t c = lane; c < visible; c += 32) m = fmaxf(m, row[c] * scale);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t c = lane; c < visible; c += 32) {
      const float e = expf(row[c] * scale - m);
      row[c] = e;
      sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t c = lane; c < tokens; c += 32) row[c] = c < visible ? row[c] * inv : 0.0f;
  }
}

__global__ void softmax_backward_kernel(const float* att, float* d, int64_t rows, int64_t tokens, float scale,
                                        bool causal) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = int64_t(blockIdx.x) * WARPS + threadIdx.x / 32; r < rows; r += int64_t(gridDim.x) * WARPS) {
    const float* a = att + r * tokens;
    float* g = d + r * tokens;
    const int64_t visible = causal ? r % tokens + 1 : tokens;
    float dot = 0.0f;
    for (int64_t c = lane; c < visible; c += 32) dot += a[c] * g[c];
    dot = warp_sum(dot);
    for (int64_t c = lane; c < tokens; c += 32) g[c] = c < visible ? a[c] * (g[c] - dot) * scale : 0.0f;
  }
}

unsigned row_blocks(int64_t rows) {
  return unsigned(std::clamp<int64_t>((rows + WARPS - 1) / WARPS, 1, cuda_launch::MAX_BLOCKS));
}

}  // namespace

void attention_split_heads_cuda(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t tokens,
                                int64_t heads, int64_t head_size, void* stream) {
  launch_elementwise(SplitHeads{qkv, q, k, v, tokens, heads, head_size}, batch * heads * tokens * head_size, stream);
}

void attention_split_part_cuda(const float* src, float* o, int64_t batch, int64_t tokens, int64_t heads,
                               int64_t head_size, int64_t row_width, int part, void* stream) {
  launch_elementwise(SplitPart{src, o, tokens, heads, head_size, row_width, part}, batch * heads * tokens * head_size,
                     stream);
}

void attention_merge_heads_cuda(const float* o, float* out, int64_t batch, int64_t tokens, int64_t heads,
                                int64_t head_size, int64_t row_width, int part, void* stream) {
  launch_elementwise(MergeHeads{o, out, tokens, heads, head_size, row_width, part}, batch * heads * tokens * head_size,
                     stream);
}

void attention_softmax_forward_cuda(float* scores, int64_t rows, int64_t tokens, float scale, bool causal,
                                    void* stream) {
  if (rows <= 0 || tokens <= 0) return;
  softmax_forward_kernel<<<row_blocks(rows), WARPS * 32, 0, as_stream(stream)>>>(scores, rows, tokens, scale, causal);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

void attention_softmax_backward_cuda(const float* att, float* d, int64_t rows, int64_t tokens, float scale, bool causal,
                                     void* stream) {
  if (rows <= 0 || tokens <= 0) return;
  softmax_backward_kernel<<<row_blocks(rows), WARPS * 32, 0, as_stream(stream)>>>(att, d, rows, tokens, scale, causal);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qsync
