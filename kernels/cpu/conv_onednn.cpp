// File: kernels/cpu/conv_onednn.cpp
// oneDNN convolution primitives for the host engine (see conv_onednn.h). Per distinct call one
// primitive descriptor with "any" layouts, the reorders between the caller's NCHW / OIHW and the
// layouts oneDNN picked, and their sizes; cached for the process.
#include "kernels/cpu/conv_onednn.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "kernels/cpu/conv_int8_output.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/onednn_host.h"
#include "kernels/cpu_isa.h"

namespace qsync {
namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The per-thread buffers of one call, by role.
enum Role { IN0, IN1, OUT, OUT_PLAIN, SCRATCH, W_DOUBLED, ROLES };
GrowingBuffer& thread_buffer(Role r) {
  thread_local GrowingBuffer buffers[ROLES];
  return buffers[r];
}

dt onednn_type(Precision p) {
  switch (p) {
    case Precision::FP32: return dt::f32;
    case Precision::BF16: return dt::bf16;
    case Precision::INT8: return dt::s8;
    default: return dt::undef;
  }
}

struct Key {
  ConvOnednnOp op;
  Precision type;
  int64_t n, c, h, w, o, kernel, stride, pad, oh, ow;
  bool bias;
  bool relu;  // the relu post-op (FP32 and BF16 forward; INT8 applies it in its output transform)
  auto tie() const { return std::tie(op, type, n, c, h, w, o, kernel, stride, pad, oh, ow, bias, relu); }
  bool operator<(const Key& k) const { return tie() < k.tie(); }
};

Key key_of(const ConvOnednnCall& c) {
  const ConvOnednnShape& s = c.shape;
  const bool forward_not_int8 = c.op == ConvOnednnOp::FORWARD && c.type != Precision::INT8;
  return {c.op, c.type, s.n, s.c, s.h, s.w, s.o, s.kernel, s.stride, s.pad, s.oh, s.ow,
          forward_not_int8 && c.bias != nullptr, forward_not_int8 && c.relu};
}

// INT8 weights below VNNI are handed to oneDNN doubled (see conv_onednn.h).
bool int8_weights_doubled(Precision type) { return type == Precision::INT8 && cpu_isa_active() < CpuIsa::AVX512; }

// One cached convolution: the primitive, the caller's plain layouts of its two inputs and its
// output, the layouts the primitive wants, and the reorders between them (when they differ).
struct ConvPrimitive {
  std::string impl;  // "" when oneDNN has no usable kernel
  dnnl::primitive prim;
  memory::desc in_user[2], in_prim[2], out_user, out_prim, scratch;
  dnnl::reorder in_reorder[2], out_reorder;
  bool in_reordered[2] = {false, false}, out_reordered = false;
  bool out_nhwc = false;  // the output comes in NHWC (oneDNN's INT8 kernels)
  // A relu key whose post-op would change oneDNN's kernel (and so maybe its order of sums): the
  // primitive is the plain one and the ReLU runs as a pass after it.
  bool relu_in_pass = false;
};

bool is_ref(const std::string& impl) { return impl.empty() || impl.rfind("ref", 0) == 0; }

void set_reorders(ConvPrimitive& p) {
  for (int i = 0; i < 2; ++i) {
    p.in_reordered[i] = p.in_prim[i] != p.in_user[i];
    if (p.in_reordered[i]) p.in_reorder[i] = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_cpu_engine(), p.in_user[i], onednn_cpu_engine(), p.in_prim[i]));
  }
  p.out_reordered = p.out_prim != p.out_user;
  const memory::dims& d = p.out_user.dims();
  p.out_nhwc = p.out_prim == memory::desc(d, p.out_user.data_type(), tag::nhwc);
  if (p.out_reordered) p.out_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_cpu_engine(), p.out_prim, onednn_cpu_engine(), p.out_user));
}

// The primitive of a descriptor and the layouts of its two inputs and its output.
template <class Primitive, class Desc>
void set_primitive(const Desc& pd, const memory::desc& in0, const memory::desc& in1, const memory::desc& out, ConvPrimitive& p) {
  p.impl = pd.impl_info_str();
  p.in_prim[0] = in0;
  p.in_prim[1] = in1;
  p.out_prim = out;
  p.scratch = pd.scratchpad_desc();
  p.prim = Primitive(pd);
}

// INT8 backward data: dx (N, C, H, W) = the deconvolution of dy (N, O, OH, OW) with the
// convolution's strides and padding, whose weights (C, O, k, k) are ours with the first two
// dimensions swapped (tag iohw over our OIHW buffer). oneDNN's INT8 backward is inference-only.
void set_int8_backward_data(const Key& k, const dnnl::primitive_attr& attr, ConvPrimitive& p) {
  const memory::dims src_dims = {k.n, k.c, k.h, k.w}, wei_t_dims = {k.c, k.o, k.kernel, k.kernel};
  const memory::dims dst_dims = {k.n, k.o, k.oh, k.ow}, strides = {k.stride, k.stride};
  const memory::dims pad_l = {k.pad, k.pad};
  const memory::dims pad_r = {(k.oh - 1) * k.stride + k.kernel - k.h - k.pad, (k.ow - 1) * k.stride + k.kernel - k.w - k.pad};
  const dnnl::deconvolution_forward::primitive_desc pd(
      dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                        memory::desc(dst_dims, dt::s8, tag::any), memory::desc(wei_t_dims, dt::s8, tag::any),
                                        memory::desc(src_dims, dt::f32, tag::any), strides, pad_l, pad_r),
      attr, onednn_cpu_engine());
  set_primitive<dnnl::deconvolution_forward>(pd, pd.weights_desc(), pd.src_desc(), pd.dst_desc(), p);
  p.in_user[0] = memory::desc(wei_t_dims, dt::s8, tag::iohw);
  p.in_user[1] = memory::desc(dst_dims, dt::s8, tag::nchw);
  p.out_user = memory::desc(src_dims, dt::f32, tag::nchw);
}

ConvPrimitive create(const Key& k) {
  ConvPrimitive p;
  const dt t = onednn_type(k.type);
  if (t == dt::undef) return p;
  const int64_t pad_r_h = (k.oh - 1) * k.stride + k.kernel - k.h - k.pad;
  const int64_t pad_r_w = (k.ow - 1) * k.stride + k.kernel - k.w - k.pad;
  if (pad_r_h < 0 || pad_r_w < 0) return p;
  const memory::dims src_dims = {k.n, k.c, k.h, k.w}, wei_dims = {k.o, k.c, k.kernel, k.kernel};
  const memory::dims dst_dims = {k.n, k.o, k.oh, k.ow}, strides = {k.stride, k.stride};
  const memory::dims pad_l = {k.pad, k.pad}, pad_r = {pad_r_h, pad_r_w};
  const memory::desc src_any(src_dims, t, tag::any), wei_any(wei_dims, t, tag::any);
  const memory::desc dst_f32_any(dst_dims, dt::f32, tag::any);
  const memory::desc bias_md({k.o}, dt::f32, tag::x);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algo = dnnl::algorithm::convolution_direct;
  try {
    if (k.op == ConvOnednnOp::FORWARD) {
      // INT8: oneDNN 2's JIT convolutions take no run-time output scales (fixed ones would mean a
      // primitive per step); the integer sums come out as FP32 and the scales follow (run).
      // oneDNN's INT8 convolutions are inference-only; for a convolution the two are the same.
      const auto prop = k.type == Precision::INT8 ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      const auto d = k.bias ? dnnl::convolution_forward::desc(prop, algo, src_any, wei_any, bias_md, dst_f32_any,
                                                              strides, pad_l, pad_r)
                            : dnnl::convolution_forward::desc(prop, algo, src_any, wei_any, dst_f32_any, strides,
                                                              pad_l, pad_r);
      dnnl::convolution_forward::primitive_desc pd(d, attr, onednn_cpu_engine());
      if (k.relu) {  // eltwise_relu with alpha 0 is a max with zero (NaN and -0 to +0)
        dnnl::primitive_attr relu_attr;  // (a copy of attr would share its handle)
        relu_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        relu_attr.set_post_ops(ops);
        const dnnl::convolution_forward::primitive_desc relu_pd(d, relu_attr, onednn_cpu_engine(), true);
        // The post-op only where it leaves the kernel (its sums) as the plain convolution's.
        p.relu_in_pass = !relu_pd || relu_pd.impl_info_str() != pd.impl_info_str();
        if (!p.relu_in_pass) pd = relu_pd;
      }
      set_primitive<dnnl::convolution_forward>(pd, pd.src_desc(), pd.weights_desc(), pd.dst_desc(), p);
      p.in_user[0] = memory::desc(src_dims, t, tag::nchw);
      p.in_user[1] = memory::desc(wei_dims, t, tag::oihw);
      p.out_user = memory::desc(dst_dims, dt::f32, tag::nchw);
    } else if (k.op == ConvOnednnOp::BACKWARD_DATA && k.type == Precision::INT8) {
      set_int8_backward_data(k, attr, p);
    } else {
      // The forward hint: the same convolution in the backward's input type.
      const memory::desc dst_any(dst_dims, t, tag::any);
      const dnnl::convolution_forward::primitive_desc hint(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any, strides,
                                          pad_l, pad_r),
          onednn_cpu_engine());
      if (k.op == ConvOnednnOp::BACKWARD_DATA) {
        const memory::desc dsrc_f32_any(src_dims, dt::f32, tag::any);
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(algo, dsrc_f32_any, wei_any, dst_any, strides, pad_l, pad_r), attr,
            onednn_cpu_engine(), hint);
        set_primitive<dnnl::convolution_backward_data>(pd, pd.weights_desc(), pd.diff_dst_desc(), pd.diff_src_desc(), p);
        p.in_user[0] = memory::desc(wei_dims, t, tag::oihw);
        p.in_user[1] = memory::desc(dst_dims, t, tag::nchw);
        p.out_user = memory::desc(src_dims, dt::f32, tag::nchw);
      } else {
        const memory::desc dwei_f32_any(wei_dims, dt::f32, tag::any);
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(algo, src_any, dwei_f32_any, dst_any, strides, pad_l, pad_r), attr,
            onednn_cpu_engine(), hint);
        set_primitive<dnnl::convolution_backward_weights>(pd, pd.src_desc(), pd.diff_dst_desc(), pd.diff_weights_desc(), p);
        p.in_user[0] = memory::desc(src_dims, t, tag::nchw);
        p.in_user[1] = memory::desc(dst_dims, t, tag::nchw);
        p.out_user = memory::desc(wei_dims, dt::f32, tag::oihw);
      }
    }
    set_reorders(p);
  } catch (const dnnl::error&) {
    p.impl.clear();
  }
  // A gemm-based implementation is im2col + GEMM again; only the direct JIT kernels are taken.
  if (is_ref(p.impl) || p.impl.find("gemm") != std::string::npos) p.impl.clear();
  return p;
}

const ConvPrimitive& cached(const ConvOnednnCall& c) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<ConvPrimitive>> cache;
  const Key k = key_of(c);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, std::make_unique<ConvPrimitive>(create(k))).first;
  return *it->second;
}

// Whether the active ISA computes the call's type exactly in oneDNN's JIT kernels.
bool isa_allows(const ConvOnednnCall& c) {
  switch (c.type) {
    case Precision::FP32: return true;
    case Precision::BF16: return cpu_isa_active() >= CpuIsa::AVX512_BF16;  // else a slow emulation
    // Every level has oneDNN JIT INT8 kernels (vpmaddubsw from SSE4.1, VNNI from AVX512): exact
    // below VNNI with doubled 7-bit weights (conv_onednn.h). No INT8 backward weights in oneDNN.
    case Precision::INT8: return c.op != ConvOnednnOp::BACKWARD_WEIGHTS;
    default: return false;
  }
}

}  // namespace

std::string conv_onednn_impl(const ConvOnednnCall& call) { return isa_allows(call) ? cached(call).impl : ""; }

bool conv_onednn_supports(const ConvOnednnCall& call) { return !conv_onednn_impl(call).empty(); }

namespace {

void check_supported(const ConvOnednnCall& call) {
  if (!conv_onednn_supports(call))
    throw std::logic_error("conv_onednn_run: oneDNN has no exact JIT convolution for this call under the active ISA; "
                           "check conv_onednn_supports first and use the im2col path");
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(onednn_cpu_engine());
  return stream;
}

Int8Output int8_output_of(const ConvOnednnCall& call) {
  const ConvOnednnShape& s = call.shape;
  const float halve = int8_weights_doubled(call.type) ? 0.5f : 1.0f;
  if (call.op == ConvOnednnOp::FORWARD)
    return {s.n, s.o, s.oh * s.ow, call.x_scale * halve, call.w_scales, call.bias, call.relu, call.relu_mask};
  return {s.n, s.c, s.h * s.w, call.dy_scale * call.w_scales[0] * halve, nullptr, nullptr};
}

// The INT8 weights as oneDNN gets them: the caller's, or below VNNI doubled into a per-thread
// buffer after checking they are 7-bit. Once per call (every chunk of samples takes them).
const void* int8_weights_for_onednn(const ConvOnednnCall& call) {
  if (!int8_weights_doubled(call.type)) return call.w;
  const ConvOnednnShape& s = call.shape;
  const int64_t n = s.o * s.c * s.kernel * s.kernel;
  const auto* w = static_cast<const int8_t*>(call.w);
  auto* doubled = static_cast<int8_t*>(thread_buffer(W_DOUBLED).get(size_t(n)));
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad |= std::abs(int(w[i])) > INT8_REDUCED_RANGE_MAX;
    doubled[i] = int8_t(2 * w[i]);
  }
  if (bad != 0)
    throw std::invalid_argument("conv_onednn_run: INT8 weights beyond +-" + std::to_string(INT8_REDUCED_RANGE_MAX) +
                                " on a CPU class without VNNI, where oneDNN halves them (inexact for odd weights): "
                                "quantize them with qmax cpu_int8_activation_max()");
  return doubled;
}

// Runs a supported call; `prepared_dy`: dy already in the primitive's layout (shared by the two
// backward convolutions), or nullptr.
void run_call(const ConvOnednnCall& call, const memory* prepared_dy) {
  const ConvPrimitive& p = cached(call);
  dnnl::engine& eng = onednn_cpu_engine();
  dnnl::stream& stream = thread_stream();
  const bool int8 = call.type == Precision::INT8;  // INT8 weights: as int8_weights_for_onednn gives them
  const void* in_ptr[2];
  int in_arg[2];
  float* const out = call.out;
  switch (call.op) {
    case ConvOnednnOp::FORWARD: in_ptr[0] = call.x; in_ptr[1] = call.w; in_arg[0] = DNNL_ARG_SRC; in_arg[1] = DNNL_ARG_WEIGHTS; break;
    case ConvOnednnOp::BACKWARD_DATA:  // INT8: a deconvolution whose source is dy
      in_ptr[0] = call.w; in_ptr[1] = call.dy; in_arg[0] = DNNL_ARG_WEIGHTS; in_arg[1] = int8 ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST;
      break;
    case ConvOnednnOp::BACKWARD_WEIGHTS: in_ptr[0] = call.x; in_ptr[1] = call.dy; in_arg[0] = DNNL_ARG_SRC; in_arg[1] = DNNL_ARG_DIFF_DST; break;
  }
  std::unordered_map<int, memory> args;
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && prepared_dy != nullptr) {
      args.emplace(in_arg[i], *prepared_dy);
      continue;
    }
    memory user(p.in_user[i], eng, const_cast<void*>(in_ptr[i]));
    if (!p.in_reordered[i]) {
      args.emplace(in_arg[i], user);
      continue;
    }
    memory blocked(p.in_prim[i], eng, thread_buffer(Role(IN0 + i)).get(p.in_prim[i].get_size()));
    p.in_reorder[i].execute(stream, user, blocked);
    args.emplace(in_arg[i], blocked);
  }
  // Backward weights accumulates: oneDNN writes dw into a buffer, added to out below.
  const bool accumulate = call.op == ConvOnednnOp::BACKWARD_WEIGHTS;
  float* const plain_out = accumulate ? static_cast<float*>(thread_buffer(OUT_PLAIN).get(p.out_user.get_size())) : out;
  memory out_user(p.out_user, eng, plain_out);
  memory out_prim = p.out_reordered ? memory(p.out_prim, eng, thread_buffer(OUT).get(p.out_prim.get_size())) : out_user;
  const int out_arg = call.op == ConvOnednnOp::FORWARD || int8 ? DNNL_ARG_DST
                      : call.op == ConvOnednnOp::BACKWARD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_DIFF_WEIGHTS;
  args.emplace(out_arg, out_prim);
  if (key_of(call).bias) args.emplace(DNNL_ARG_BIAS, memory(memory::desc({call.shape.o}, dt::f32, tag::x), eng, const_cast<float*>(call.bias)));
  const size_t scratch_bytes = p.scratch.get_size();
  if (scratch_bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, eng, thread_buffer(SCRATCH).get(scratch_bytes)));
  p.prim.execute(stream, args);
  if (int8 && p.out_nhwc) {  // one pass: NHWC -> NCHW with the scales and the bias
    stream.wait();
    int8_nhwc_to_nchw(static_cast<const float*>(out_prim.get_data_handle()), int8_output_of(call), out);
    return;
  }
  if (p.out_reordered) p.out_reorder.execute(stream, out_prim, out_user);
  stream.wait();
  if (accumulate) {
    const int64_t n = call.shape.o * call.shape.c * call.shape.kernel * call.shape.kernel;
    for (int64_t i = 0; i < n; ++i) out[i] += plain_out[i];
  }
  if (int8) int8_scale_in_place(int8_output_of(call), out);
  if (!int8 && call.relu && p.relu_in_pass) {  // the ReLU the post-op could not take
    const int64_t n = call.shape.n * call.shape.o * call.shape.oh * call.shape.ow;
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] > 0.0f ? out[i] : 0.0f;
  }
  if (!int8 && call.relu_mask != nullptr) {  // the mask of the ReLU's outputs
    const int64_t n = call.shape.n * call.shape.o * call.shape.oh * call.shape.ow;
    uint8_t* const mask = call.relu_mask;
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) mask[i] = out[i] > 0.0f ? 1 : 0;
  }
}

// An INT8 call in chunks of samples whose FP32 sums stay in L2 (1 MiB of them) until the output
// transform reads them; the whole call when a chunk's shape has no kernel. Measured on Zen 5,
// cpu-avx2, the zoo CNN: conv2's forward 9.8 -> 9.2 ms (256 KiB chunks: 10.0, 4 MiB: 9.4).
void run_int8_in_chunks(const ConvOnednnCall& whole) {
  ConvOnednnCall call = whole;
  call.w = int8_weights_for_onednn(whole);
  const ConvOnednnShape& s = call.shape;
  const bool forward = call.op == ConvOnednnOp::FORWARD;
  const int64_t in_bytes = forward ? s.c * s.h * s.w : s.o * s.oh * s.ow;  // per sample, s8
  const int64_t out_floats = forward ? s.o * s.oh * s.ow : s.c * s.h * s.w;
  constexpr int64_t SUMS_BYTES = int64_t{1} << 20;
  const int64_t chunk = std::max<int64_t>(1, SUMS_BYTES / (out_floats * 4));
  if (chunk >= s.n) return run_call(call, nullptr);
  ConvOnednnCall part = call;
  part.shape.n = chunk;
  ConvOnednnCall rest = call;
  rest.shape.n = s.n % chunk;
  if (!conv_onednn_supports(part) || (rest.shape.n > 0 && !conv_onednn_supports(rest))) return run_call(call, nullptr);
  for (int64_t s0 = 0; s0 < s.n; s0 += chunk) {
    ConvOnednnCall c = s0 + chunk <= s.n ? part : rest;
    const auto* in = static_cast<const int8_t*>(forward ? call.x : call.dy) + s0 * in_bytes;
    (forward ? c.x : c.dy) = in;
    c.out = call.out + s0 * out_floats;
    if (call.relu_mask != nullptr) c.relu_mask = call.relu_mask + s0 * out_floats;
    run_call(c, nullptr);
  }
}

}  // namespace

void conv_onednn_run(const ConvOnednnCall& call) {
  check_supported(call);
  if (call.type == Precision::INT8) return run_int8_in_chunks(call);
  run_call(call, nullptr);
}

void conv_onednn_run_backward(const ConvOnednnCall& data, const ConvOnednnCall& weights) {
  check_supported(data);
  check_supported(weights);
  const ConvPrimitive& pd = cached(data);
  const ConvPrimitive& pw = cached(weights);
  if (data.dy != weights.dy || !pd.in_reordered[1] || !pw.in_reordered[1] || pd.in_prim[1] != pw.in_prim[1]) {
    run_call(data, nullptr);
    run_call(weights, nullptr);
    return;
  }
  // Both want dy in the same blocked layout: reorder it once (a buffer of its own role).
  thread_local GrowingBuffer dy_buffer;
  dnnl::engine& eng = onednn_cpu_engine();
  memory user(pd.in_user[1], eng, const_cast<void*>(data.dy));
  memory blocked(pd.in_prim[1], eng, dy_buffer.get(pd.in_prim[1].get_size()));
  pd.in_reorder[1].execute(thread_stream(), user, blocked);
  run_call(data, &blocked);
  run_call(weights, &blocked);
}

}  // namespace qsync
