// File: kernels/cpu/conv_onednn_primitive.cpp
// Building and caching the oneDNN convolution primitives (conv_onednn_primitive.h).
#include "kernels/cpu/conv_onednn_primitive.h"

#include <map>
#include <memory>
#include <mutex>

#include <omp.h>

#include "kernels/cpu/onednn_host.h"

namespace qsync::conv_onednn {
namespace {

using tag = dnnl::memory::format_tag;

dt onednn_type(Precision p) {
  switch (p) {
    case Precision::FP32: return dt::f32;
    case Precision::BF16: return dt::bf16;
    case Precision::INT8: return dt::s8;
    default: return dt::undef;
  }
}

Reorder make_reorder(const memory::desc& from, const memory::desc& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc pd(onednn_cpu_engine(), from, onednn_cpu_engine(), to, attr);
  return {dnnl::reorder(pd), pd.scratchpad_desc()};
}

bool is_ref(const std::string& impl) { return impl.empty() || impl.rfind("ref", 0) == 0; }

void set_reorders(ConvPrimitive& p) {
  for (int i = 0; i < 2; ++i) {
    p.in_reordered[i] = p.in_prim[i] != p.in_user[i];
    if (p.in_reordered[i]) p.in_reorder[i] = make_reorder(p.in_user[i], p.in_prim[i]);
    const memory::dims in_dims = p.in_user[i].dims();
    p.in_nhwc_bytes[i] = in_dims.size() == 4 && p.in_user[i] == memory::desc(in_dims, dt::s8, tag::nchw) &&
                         p.in_prim[i] == memory::desc(in_dims, dt::s8, tag::nhwc);
  }
  p.out_reordered = p.out_prim != p.out_user;
  const memory::dims& d = p.out_user.dims();
  p.out_nhwc = p.out_prim == memory::desc(d, p.out_user.data_type(), tag::nhwc);
  if (p.out_reordered) p.out_reorder = make_reorder(p.out_prim, p.out_user);
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

}  // namespace

Key key_of(const ConvOnednnCall& c) {
  const ConvOnednnShape& s = c.shape;
  const bool forward_not_int8 = c.op == ConvOnednnOp::FORWARD && c.type != Precision::INT8;
  return {c.op, c.type, s.n, s.c, s.h, s.w, s.o, s.kernel, s.stride, s.pad, s.oh, s.ow,
          forward_not_int8 && c.bias != nullptr, forward_not_int8 && c.relu, omp_get_max_threads()};
}

const ConvPrimitive& cached_primitive(const ConvOnednnCall& c) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<ConvPrimitive>> cache;
  const Key k = key_of(c);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, std::make_unique<ConvPrimitive>(create(k))).first;
  return *it->second;
}

}  // namespace qsync::conv_onednn
