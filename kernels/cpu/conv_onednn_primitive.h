// File: kernels/cpu/conv_onednn_primitive.h
// The cached oneDNN convolution primitives behind conv_onednn.h: per distinct call (op, type,
// shape, epilogue, threads) one primitive descriptor with "any" layouts, the reorders between the
// caller's NCHW / OIHW and the layouts oneDNN picked, and their sizes; built on first use and kept
// for the process.
#pragma once

#include <string>
#include <tuple>

#include <dnnl.hpp>

#include "kernels/cpu/conv_onednn.h"

namespace qsync::conv_onednn {

using dnnl::memory;
using dt = dnnl::memory::data_type;

struct Key {
  ConvOnednnOp op;
  Precision type;
  int64_t n, c, h, w, o, kernel, stride, pad, oh, ow;
  bool bias;
  bool relu;  // the relu post-op (FP32 and BF16 forward; INT8 applies it in its output transform)
  // oneDNN sizes a kernel's work split when the primitive is built, for the threads it may use then:
  // one (a thread's own samples, run_int8_in_chunks) or the team's.
  int threads;
  auto tie() const { return std::tie(op, type, n, c, h, w, o, kernel, stride, pad, oh, ow, bias, relu, threads); }
  bool operator<(const Key& k) const { return tie() < k.tie(); }
};

// The key of a call, with the threads oneDNN may use now.
Key key_of(const ConvOnednnCall& c);

// A reorder between two layouts, with no scratchpad of its own (user mode): the same cached reorder
// may run on several threads at once (a call's samples split over threads, tensor-parallel ranks
// as threads), and a library-owned scratchpad would be shared between them.
struct Reorder {
  dnnl::reorder prim;
  memory::desc scratch;
};

// One cached convolution: the primitive, the caller's plain layouts of its two inputs and its
// output, the layouts the primitive wants, and the reorders between them (when they differ).
struct ConvPrimitive {
  std::string impl;  // "" when oneDNN has no usable kernel
  dnnl::primitive prim;
  memory::desc in_user[2], in_prim[2], out_user, out_prim, scratch;
  Reorder in_reorder[2], out_reorder;
  bool in_reordered[2] = {false, false}, out_reordered = false;
  // An input reordered from NCHW to NHWC bytes (INT8 x and dy): run_call transposes it itself
  // (conv_int8_input.h) rather than through oneDNN's reorder.
  bool in_nhwc_bytes[2] = {false, false};
  bool out_nhwc = false;  // the output comes in NHWC (oneDNN's INT8 kernels)
  // A relu key whose post-op would change oneDNN's kernel (and so maybe its order of sums): the
  // primitive is the plain one and the ReLU runs as a pass after it.
  bool relu_in_pass = false;
};

// The primitive of a call, built on first use (impl empty when oneDNN has no usable kernel: only
// its direct JIT kernels are taken, never its reference or im2col + GEMM ones).
const ConvPrimitive& cached_primitive(const ConvOnednnCall& c);

}  // namespace qsync::conv_onednn
