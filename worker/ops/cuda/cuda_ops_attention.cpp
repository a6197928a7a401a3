// File: worker/ops/cuda/cuda_ops_attention.cpp
// CudaOps: attention's score part as batched cuBLASLt products over (batch, head) pairs in FP32
// (TF32 tensor cores when the layer allows it), around the row softmax kernels:
//   forward   q, k, v (B*H, T, hs) = split(qkv); s = q k^T; att = softmax(s * scale) (causal);
//             o = att v; out (B, T, C) = merge(o)
//   backward  do = split(dout); datt = do v^T; dv = att^T do; dpre = softmax'(datt) * scale;
//             dq = dpre k; dk = dpre^T q; dqkv = merge(dq, dk, dv)
// Scratch (q, k, v, o and the score gradient) is charged to the step's account, as the CPU's is.
#include <cmath>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/cublaslt_matmul.h"
#include "worker/layer.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

// One strided-batched product C_i = op(A_i) op(B_i) over `batch` (rows, cols) matrices.
void batched(CudaMatmulEngine& e, Precision p, const float* a, Transpose ta, int64_t a_rows, int64_t a_cols,
             const float* b, Transpose tb, int64_t b_rows, int64_t b_cols, float* c, int64_t batch) {
  CudaMatmul mm;
  GemmDesc& d = mm.gemm;
  d.m = ta == Transpose::YES ? a_cols : a_rows;
  d.k = ta == Transpose::YES ? a_rows : a_cols;
  d.n = tb == Transpose::YES ? b_rows : b_cols;
  d.a = {a, p, ta, a_cols, ScaleMode::NONE, nullptr};
  d.b = {b, p, tb, b_cols, ScaleMode::NONE, nullptr};
  d.c = c;
  d.ldc = d.n;
  mm.batch = batch;
  mm.stride_a = a_rows * a_cols;
  mm.stride_b = b_rows * b_cols;
  mm.stride_c = d.m * d.n;
  e.run(mm);
}

}  // namespace

void CudaOps::attention_forward(const Tensor& qkv, const AttentionShape& s, bool allow_tf32, Tensor& att, Tensor& out,
                                StepContext& ctx, const std::string& layer) {
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H, BH = B * H;
  const Precision p = allow_tf32 && sm_ >= 80 ? Precision::TF32 : Precision::FP32;
  const float scale = 1.0f / std::sqrt(float(hs));
  Tensor q = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " q");
  Tensor k = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " k");
  Tensor v = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " v");
  attention_split_heads_cuda(qkv.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), B, T, H, hs, stream_);
  batched(*matmul_, p, q.as<float>(), Transpose::NO, T, hs, k.as<float>(), Transpose::YES, T, hs, att.as<float>(), BH);
  attention_softmax_forward_cuda(att.as<float>(), BH * T, T, scale, s.causal, stream_);
  Tensor o = std::move(q);  // q is no longer needed: o (B*H, T, hs) takes its memory
  batched(*matmul_, p, att.as<float>(), Transpose::NO, T, T, v.as<float>(), Transpose::NO, T, hs, o.as<float>(), BH);
  attention_merge_heads_cuda(o.as<float>(), out.as<float>(), B, T, H, hs, C, 0, stream_);
}

void CudaOps::attention_backward(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s,
                                 bool allow_tf32, Tensor& dqkv, StepContext& ctx, const std::string& layer) {
  const int64_t B = s.batch, T = s.tokens, C = s.width, H = s.heads, hs = C / H, BH = B * H;
  const Precision p = allow_tf32 && sm_ >= 80 ? Precision::TF32 : Precision::FP32;
  const float scale = 1.0f / std::sqrt(float(hs));
  Tensor q = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " q");
  Tensor k = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " k");
  Tensor v = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " v");
  Tensor d_o = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " output gradient (heads)");
  Tensor datt = empty({BH, T, T}, Precision::FP32, ctx.memory, layer + " score gradient");
  Tensor grad = empty({BH, T, hs}, Precision::FP32, ctx.memory, layer + " head gradient");
  attention_split_heads_cuda(qkv.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), B, T, H, hs, stream_);
  attention_split_part_cuda(dout.as<float>(), d_o.as<float>(), B, T, H, hs, C, 0, stream_);  // do from dout (B, T, C)
  batched(*matmul_, p, d_o.as<float>(), Transpose::NO, T, hs, v.as<float>(), Transpose::YES, T, hs, datt.as<float>(), BH);
  attention_softmax_backward_cuda(att.as<float>(), datt.as<float>(), BH * T, T, scale, s.causal, stream_);
  fill_zero(dqkv);
  // dv = att^T do
  batched(*matmul_, p, att.as<float>(), Transpose::YES, T, T, d_o.as<float>(), Transpose::NO, T, hs, grad.as<float>(), BH);
  attention_merge_heads_cuda(grad.as<float>(), dqkv.as<float>(), B, T, H, hs, 3 * C, 2, stream_);
  // dq = dpre k
  batched(*matmul_, p, datt.as<float>(), Transpose::NO, T, T, k.as<float>(), Transpose::NO, T, hs, grad.as<float>(), BH);
  attention_merge_heads_cuda(grad.as<float>(), dqkv.as<float>(), B, T, H, hs, 3 * C, 0, stream_);
  // dk = dpre^T q
  batched(*matmul_, p, datt.as<float>(), Transpose::YES, T, T, q.as<float>(), Transpose::NO, T, hs, grad.as<float>(), BH);
  attention_merge_heads_cuda(grad.as<float>(), dqkv.as<float>(), B, T, H, hs, 3 * C, 1, stream_);
}

}  // namespace qsync
