// File: worker/layers/graph_host.h
// The ONNX graph's own layers (batchnorm, elementwise, softmax, layout, matmul of activations,
// gather, avgpool) compute in plain host loops: these are their _ref and their implementation.
// On a CUDA rank operands come down to the host and results go back up (correct, not fast:
// docs/onnx.md); on a CPU rank nothing is copied.
#pragma once

#include <string>

#include "worker/layer.h"

namespace qsync {

// `t` when it is on the host, else a host copy.
inline Tensor host_of(const Tensor& t) { return tensor_to_host(t); }

// A fresh FP32 host tensor, charged to the step's memory when the rank is the host.
inline Tensor host_empty(const Shape& s, StepContext& ctx, const std::string& what) {
  const bool host_rank = ops_of(ctx).device().is_host();
  return Tensor::empty(s, Precision::FP32, host_rank ? ctx.memory : nullptr, what);
}

// `host` on the rank's device (itself on a CPU rank).
inline Tensor to_rank(const Tensor& host, StepContext& ctx, const std::string& what) {
  DeviceOps& ops = ops_of(ctx);
  if (ops.device().is_host()) return host;
  Tensor d = ops.empty(host.shape(), host.precision(), ctx.memory, what);
  tensor_copy_from_host(host, d);
  return d;
}

// p.grad += g (g on the host, p's shape).
inline void accumulate_grad(Parameter& p, const Tensor& g, StepContext& ctx) {
  DeviceOps& ops = ops_of(ctx);
  if (p.grad.on_host()) {
    float* d = p.grad.f32();
    const float* s = g.f32();
    for (int64_t i = 0; i < g.numel(); ++i) d[i] += s[i];
    return;
  }
  Tensor up = ops.empty(g.shape(), Precision::FP32, nullptr, p.name + ".grad_upload");
  tensor_copy_from_host(g, up);
  ops.add(p.grad, up, p.grad);
}

}  // namespace qsync
