// File: worker/ops/cuda/cuda_ops_conv.cpp
// CudaOps: Conv2d.
//   FP32 / TF32 / BF16 / FP16 operands: cuDNN (kernels/cuda/cudnn_conv.h) on the NCHW tensors;
//     16-bit outputs are written to scratch and widened to FP32 (the weight gradient is then
//     added to the FP32 gradient); FP32 outputs are written (and the weight gradient
//     accumulated, beta 1) in place.
//   INT8 / FP8 operands (int8's forward, int8-all, fp8): im2col GEMMs on IMMA / FP8 tensor
//     cores, laid out for cuBLASLt's TN (both operands k-contiguous):
//       forward      y_cm (O, n)    = W (O, CKK) cols_t (n, CKK)^T       cols_t: taps contiguous
//       input grad   dcols (CKK, n) = W^T (CKK, O) g_t (n, O)^T          W^T, g_t: transposed copies
//       weight grad  dW (O, CKK)   += g (O, n) cols (CKK, n)^T           cols: positions contiguous
//     in chunks of samples that bound the columns' scratch; the output gradient is cast once
//     per chunk (as on the CPU), channel-major.
//   The bias gradient sums the FP32 dy in the CPU's order (kernels/cuda/conv_cuda.h).
//   A fused ReLU (ConvEpilogue) runs as the relu kernel in place after the forward; a deferred
//   ReLU mask (Conv2dBackward::relu_mask; conv_backward_reads_relu_mask is false, so the layer
//   never defers here) is applied to a copy of dy first.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/conv_cuda.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/layout_cuda.h"
#include "kernels/cuda/quantize_cuda.h"
#include "worker/layer.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

Conv2dShape shape_of(const ConvGeometry& g) { return {g.c, g.h, g.w, g.k, g.stride, g.pad, g.oh, g.ow}; }

CudnnConvShape cudnn_shape(const ConvGeometry& g, int64_t batch, int64_t o) {
  return {batch, g.c, g.h, g.w, o, g.k, g.stride, g.pad, g.oh, g.ow};
}

// The cuDNN tensor type of an operand (TF32 tensors are FP32 data).
Precision cudnn_type(Precision p) { return p == Precision::TF32 ? Precision::FP32 : p; }

// Samples per chunk of the im2col path: at most about 64 Mi column elements.
int64_t im2col_chunk(const ConvGeometry& g, int64_t batch) {
  const int64_t per_sample = g.oh * g.ow * g.c * g.k * g.k;
  return std::clamp<int64_t>((int64_t(64) << 20) / std::max<int64_t>(1, per_sample), 1, batch);
}

// y FP32 from a 16-bit cuDNN output.
void widen(const Tensor& y16, Tensor& y, void* stream) {
  if (y16.precision() == Precision::BF16) convert_bf16_to_fp32_cuda(y16.as<uint16_t>(), y.as<float>(), y.numel(), stream);
  else convert_fp16_to_fp32_cuda(y16.as<uint16_t>(), y.as<float>(), y.numel(), stream);
}

}  // namespace

// The ReLU epilogue as the relu kernel in place on the stream after the convolution (it reads
// each value before writing it).
void CudaOps::conv2d_forward(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                             const ConvEpilogue& epilogue, Tensor& y, StepContext& ctx, const std::string& layer) {
  conv2d_forward_affine(xc, wc, bias, g, y, ctx, layer);
  if (!epilogue.relu) return;
  OpClock clock(ctx, layer + ".relu");
  relu_forward(y, y, epilogue.relu_mask);
}

void CudaOps::conv2d_forward_affine(const Tensor& xc, const Tensor& wc, const Tensor* bias, const ConvGeometry& g,
                                    Tensor& y, StepContext& ctx, const std::string& layer) {
  const int64_t batch = xc.dim(0), o = wc.dim(0), hw = g.oh * g.ow, ckk = g.c * g.k * g.k;
  if (!precision_takes_scales(xc.precision())) {
    OpClock clock(ctx, layer + ".conv_forward");
    CudnnConvCall call;
    call.op = CudnnConvOp::FORWARD;
    call.shape = cudnn_shape(g, batch, o);
    call.type = cudnn_type(xc.precision());
    call.allow_tf32 = xc.precision() == Precision::TF32;
    call.x = xc.data();
    call.w = wc.data();
    Tensor y16;
    if (call.type == Precision::FP32) {
      call.out = y.data();
    } else {
      y16 = empty(y.shape(), call.type, ctx.memory, layer + " output (" + precision_name(call.type) + ")");
      call.out = y16.data();
    }
    conv_->run(call);
    if (y16.defined()) widen(y16, y, stream_);
    if (bias != nullptr) conv_bias_add_cuda(y.as<float>(), bias->as<float>(), batch, o, hw, stream_);
    return;
  }
  const int elem = precision_bytes(xc.precision());
  const int64_t chunk = im2col_chunk(g, batch);
  Tensor cols_t = empty({chunk * hw, ckk}, xc.precision(), ctx.memory, layer + " im2col");
  Tensor y_cm = empty({o, chunk * hw}, Precision::FP32, ctx.memory, layer + " output (channel-major)");
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    Tensor cols_n = cols_t.prefix({n * hw, ckk});
    cols_n.scale_mode = xc.scale_mode;
    cols_n.scales = xc.scales;
    {
      OpClock clock(ctx, layer + ".im2col");
      im2col_cuda(xc.data(), elem, s0, n, shape_of(g), true, cols_n.data(), stream_);
    }
    Tensor y_n = y_cm.prefix({o, n * hw});
    {
      OpClock clock(ctx, layer + ".gemm_forward");
      matmul(wc, Transpose::NO, cols_n, Transpose::YES, y_n, {});  // (O, n*HW), TN
    }
    channel_major_to_nchw_cuda(y_n.as<float>(), bias ? bias->as<float>() : nullptr, y.as<float>() + s0 * o * hw, n, o,
                               hw, stream_);
  }
}

void CudaOps::conv2d_backward(const Conv2dBackward& a, const ConvGeometry& g, StepContext& ctx,
                              const std::string& layer) {
  if (a.relu_mask != nullptr) {  // the fused ReLU's backward first, into a masked copy of dy
    Tensor masked;
    {
      OpClock clock(ctx, layer + ".relu_backward");
      masked = relu_masked_copy(*a.dy, *a.relu_mask, ctx.memory, layer + " output gradient (relu masked)");
    }
    Conv2dBackward plain = a;
    plain.dy = &masked;
    plain.relu_mask = nullptr;
    return conv2d_backward(plain, g, ctx, layer);
  }
  const Tensor& dy = *a.dy;
  const Tensor& xb = *a.x;
  const Tensor& wb = *a.w;
  const int64_t batch = dy.dim(0), o = wb.dim(0), hw = g.oh * g.ow, ckk = g.c * g.k * g.k;
  if (a.db != nullptr) {
    Tensor partial = scratch(batch * o * 4, "conv bias partials");
    conv_bias_grad_cuda(dy.as<float>(), a.db->as<float>(), batch, o, hw, partial.as<float>(), stream_);
  }
  if (!precision_takes_scales(xb.precision())) {
    const Tensor gc = a.cast_dy(dy, nullptr, -1.0f);  // (B, O, OH, OW) in the backward precision
    const Precision type = cudnn_type(gc.precision());
    CudnnConvCall call;
    call.shape = cudnn_shape(g, batch, o);
    call.type = type;
    call.allow_tf32 = gc.precision() == Precision::TF32;
    call.dy = gc.data();
    if (a.dx != nullptr) {  // nullptr: no input gradient (the model's first layer)
      OpClock clock(ctx, layer + ".conv_input_grad");
      call.op = CudnnConvOp::BACKWARD_DATA;
      call.w = wb.data();
      Tensor dx16;
      if (type == Precision::FP32) {
        call.out = a.dx->data();
      } else {
        dx16 = empty(a.dx->shape(), type, ctx.memory, layer + " input gradient (16-bit)");
        call.out = dx16.data();
      }
      conv_->run(call);
      if (dx16.defined()) widen(dx16, *a.dx, stream_);
    }
    OpClock clock(ctx, layer + ".conv_weight_grad");
    call.op = CudnnConvOp::BACKWARD_FILTER;
    call.x = xb.data();
    call.w = nullptr;
    if (type == Precision::FP32) {
      call.out = a.dw->data();
      call.beta = 1.0f;  // accumulate into the FP32 gradient
      conv_->run(call);
    } else {
      Tensor dw16 = empty(a.dw->shape(), type, ctx.memory, layer + " weight gradient (16-bit)");
      call.out = dw16.data();
      conv_->run(call);
      Tensor dw32 = empty(a.dw->shape(), Precision::FP32, ctx.memory, layer + " weight gradient (fp32)");
      widen(dw16, dw32, stream_);
      accumulate_cuda(dw32.as<float>(), a.dw->as<float>(), dw32.numel(), stream_);
    }
    return;
  }
  // The im2col path (int8-all, fp8).
  if (a.dx != nullptr) fill_zero(*a.dx);
  Tensor w_t = empty({ckk, o}, wb.precision(), ctx.memory, layer + " weight (transposed)");
  transpose(wb, w_t);  // per-tensor scales follow
  const int elem = precision_bytes(xb.precision());
  const int64_t chunk = im2col_chunk(g, batch);
  Tensor dy_cm = empty({o, chunk * hw}, Precision::FP32, ctx.memory, layer + " gradient (channel-major)");
  Tensor dcols = empty({ckk, chunk * hw}, Precision::FP32, ctx.memory, layer + " column gradient");
  Tensor cols = empty({ckk, chunk * hw}, xb.precision(), ctx.memory, layer + " im2col");
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    Tensor dy_n = dy_cm.prefix({o, n * hw});
    nchw_to_channel_major_cuda(dy.as<float>() + s0 * o * hw, dy_n.as<float>(), n, o, hw, stream_);
    const Tensor gc = a.cast_dy(dy_n, nullptr, -1.0f);  // (O, n*HW) quantized, per-tensor scale
    Tensor g_t = empty({n * hw, o}, gc.precision(), ctx.memory, layer + " gradient (transposed)");
    transpose(gc, g_t);
    if (a.dx != nullptr) {
      {
        OpClock clock(ctx, layer + ".gemm_input_grad");
        Tensor dcols_n = dcols.prefix({ckk, n * hw});
        matmul(w_t, Transpose::NO, g_t, Transpose::YES, dcols_n, {});  // (CKK, n*HW), TN
      }
      OpClock clock(ctx, layer + ".col2im");
      col2im_cuda(dcols.as<float>(), s0, n, shape_of(g), a.dx->as<float>(), stream_);
    }
    Tensor cols_n = cols.prefix({ckk, n * hw});
    cols_n.scale_mode = xb.scale_mode;
    cols_n.scales = xb.scales;
    {
      OpClock clock(ctx, layer + ".im2col");
      im2col_cuda(xb.data(), elem, s0, n, shape_of(g), false, cols_n.data(), stream_);
    }
    OpClock clock(ctx, layer + ".gemm_weight_grad");
    MatmulOptions accumulate;
    accumulate.beta = 1.0f;
    matmul(gc, Transpose::NO, cols_n, Transpose::YES, *a.dw, accumulate);  // (O, CKK), TN
  }
}

}  // namespace qsync
