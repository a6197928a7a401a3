// File: kernels/cuda/conv_cuda.h
// CUDA kernels of Conv2d's im2col path (the INT8 / FP8 convolutions, which run as GEMMs on
// IMMA / FP8 tensor cores; cuDNN takes the floating-point ones: kernels/cuda/cudnn_conv.h) and
// the layout moves around it. Images are NCHW; a tap is (ci, ky, kx), CKK = C * k * k taps.
// A plain C++ header: `stream` is a cudaStream_t as void*; device pointers; enqueue only.
//
// col2im and the bias gradient reproduce the CPU's order of additions (worker/ops/cpu/cpu_conv.cpp).
#pragma once

#include <cstdint>

namespace qsync {

struct Conv2dShape {
  int64_t c, h, w, k, stride, pad, oh, ow;
};

// im2col of samples [s0, s0 + S) of x (B, C, H, W), `elem` bytes per element, out-of-image taps
// zero. positions_major false: cols (CKK, S*OH*OW) (the CPU's layout); true: cols (S*OH*OW, CKK),
// each output position's taps contiguous (the k-contiguous B operand of the forward GEMM).
void im2col_cuda(const void* x, int elem, int64_t s0, int64_t samples, const Conv2dShape& g, bool positions_major,
                 void* cols, void* stream);
// dx (B, C, H, W) += the columns dcols (CKK, S*OH*OW) FP32 of samples [s0, s0 + S), one thread
// per input element adding its taps in (ky, kx) order.
void col2im_cuda(const float* dcols, int64_t s0, int64_t samples, const Conv2dShape& g, float* dx, void* stream);
// y (S, O, HW) = y_cm (O, S*HW) rearranged by sample, + bias[o] (bias may be null).
void channel_major_to_nchw_cuda(const float* y_cm, const float* bias, float* y, int64_t samples, int64_t o,
                                int64_t hw, void* stream);
// y (B, O, HW) += bias[o].
void conv_bias_add_cuda(float* y, const float* bias, int64_t batch, int64_t o, int64_t hw, void* stream);
// dy_cm (O, S*HW) = dy (S, O, HW) by channel.
void nchw_to_channel_major_cuda(const float* dy, float* dy_cm, int64_t samples, int64_t o, int64_t hw, void* stream);
// db (O) += sum over samples (in order) of the sum over positions (in order) of dy (B, O, HW).
// `partial` holds B * O floats.
void conv_bias_grad_cuda(const float* dy, float* db, int64_t batch, int64_t o, int64_t hw, float* partial,
                         void* stream);

}  // namespace qsync
