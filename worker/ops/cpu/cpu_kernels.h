// File: worker/ops/cpu/cpu_kernels.h
// Host kernels that other code shares with CpuOps: the layer-norm rows (tensor-parallel
// inference, worker/tp/, runs the same arithmetic), im2col / col2im (calibration measures the
// im2col norm of Conv2d inputs), the convolution's bias pass, the canonical sum of squares of the
// optimizer's global gradient norm (CudaOps computes the same tree, so every rank of a mixed job
// clips alike), 2x2 max pooling (its vector and plain rows, which the tests compare), and the
// plain reference loops of layer norm and attention.
#pragma once

#include <cstdint>

#include "kernels/column_sum_order.h"
#include "worker/ops/device_ops.h"

namespace qsync {

// Layer norm's epsilon, PyTorch's default (every implementation uses this one).
inline constexpr float LAYERNORM_EPS = 1e-5f;

// The forward over `rows` rows of C values, the one definition of the arithmetic (training and
// tensor-parallel inference share it): y (rows, C); xhat (rows, C) and rstd (rows) are written
// when not null.
void layernorm_rows(const float* x, const float* weight, const float* bias, int64_t rows, int64_t C, float* y,
                    float* xhat = nullptr, float* rstd = nullptr);
// The plain per-row loops (cpu_layernorm.cpp) that layernorm_rows and CpuOps::layernorm_backward
// match bit for bit: dy, xhat, dx (rows, C); rstd (rows); dw and db (C) are added to.
void layernorm_rows_ref(const float* x, const float* weight, const float* bias, int64_t rows, int64_t C, float* y,
                        float* xhat, float* rstd);
void layernorm_backward_ref(const float* dy, const float* xhat, const float* rstd, const float* w, int64_t rows,
                            int64_t C, float* dx, float* dw, float* db);

// Max pooling over 2x2 windows at stride 2 without padding: planes (N, H, W) -> y and argmax
// (N, H / 2, W / 2) (argmax: the window's flat index in its plane, or nullptr). NaN wins, ties go
// to the first cell in row-major order. vectors: eight windows at once with AVX2 (the same bits).
void maxpool_2x2(const float* x, int64_t planes, int64_t H, int64_t W, int64_t Ho, int64_t Wo, float* y,
                 int32_t* argmax, bool vectors);

// im2col of samples [s0, s0 + S) of x (B, C, H, W) with `elem` bytes per element into
// cols (C*k*k, S*H'*W'); out-of-image taps are zero bytes (0 in every format we use).
void im2col(const void* x, int elem, int64_t s0, int64_t samples, const ConvGeometry& g, void* cols);
// Adds cols (C*k*k, S*H'*W') FP32 back into dx (B, C, H, W) for samples [s0, s0 + S).
void col2im_add(const float* cols, int64_t s0, int64_t samples, const ConvGeometry& g, float* dx);

// x (n FP32 values) -> y in the 16-bit format `to` (BF16 or FP16: require_sixteen_bit first), by
// the vectorized converters of kernels/float_convert.h (cpu_precision.cpp).
void convert_to_sixteen_bit(const float* x, uint16_t* y, int64_t n, Precision to);
// std::logic_error naming the op `what` unless `to` is BF16 or FP16.
void require_sixteen_bit(Precision to, const char* what);

// sums[j] += sum over rows i of a[i, j] for a (rows, cols), in kernels/column_sum_order.h's order
// (the same bits at any thread count, and as CUDA's), vectorized across columns, the threads
// over chunks of rows. The bias gradient of a linear layer, and the row sums of a transposed
// GEMM operand (CpuOps::matmul's row_sums_of_a). _ref: the plain loops in that order.
void add_column_sums(const float* a, int64_t rows, int64_t cols, float* sums);
void add_column_sums_ref(const float* a, int64_t rows, int64_t cols, float* sums);

// The convolution's bias gradient pass (conv_bias_grad.cpp): db (O) += sum over samples and
// positions of dy (B, O, H'W'), in a fixed order (the same bits at any thread count, and as the
// CUDA kernel's). With a ReLU mask (dy's shape, or nullptr) the values summed are mask ? dy : +0.
// Returns the largest |value| summed (NaN ignored): the amax (quantize.h) of the gradient as an
// INT8 cast would read it. converted: nullptr, or (B, O, H'W') written with the values summed
// converted to `to` (BF16 or FP16) as convert() writes them: the gradient's 16-bit cast, in the
// same read of dy.
float conv_bias_grad_add(const float* dy, const uint8_t* mask, int64_t batch, int64_t o, int64_t hw, float* db,
                         Precision to = Precision::FP32, uint16_t* converted = nullptr);

// sum of g[i]^2 in double over n values, in the canonical order: blocks of
// CANONICAL_SUM_BLOCK values (the last one padded with zeros) each reduced by halving
// (v[i] += v[i + half] for half = BLOCK/2, ..., 1), then the block sums reduced the same way in
// groups of BLOCK, level after level, until one value is left. Every square is exact in double
// and additions of zero are exact, so any implementation of this tree gives the same bits.
inline constexpr int64_t CANONICAL_SUM_BLOCK = 2048;
double canonical_sum_of_squares(const float* g, int64_t n);

// Attention's score part as plain loops (cpu_attention.cpp): the oracle CpuOps::attention_forward
// and attention_backward match bit for bit. qkv (B, T, 3C); att (B, H, T, T); out (B, T, C);
// dout (B, T, C); dqkv (B, T, 3C), overwritten.
void attention_forward_ref(const Tensor& qkv, const AttentionShape& s, Tensor& att, Tensor& out);
void attention_backward_ref(const Tensor& qkv, const Tensor& att, const Tensor& dout, const AttentionShape& s, Tensor& dqkv);

}  // namespace qsync
