// File: kernels/cpu/conv_onednn.cpp
// Running oneDNN convolutions for the host engine (see conv_onednn.h): the caller's operands
// reordered into the cached primitive's layouts (conv_onednn_primitive.h) in per-thread buffers,
// the INT8 output transform, INT8 calls in runs of samples split over the threads.
#include "kernels/cpu/conv_onednn.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "kernels/cpu/conv_int8_input.h"
#include "kernels/cpu/conv_int8_output.h"
#include "kernels/cpu/conv_onednn_primitive.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/onednn_host.h"
#include "kernels/cpu_isa.h"

namespace qsync {
namespace {

using namespace conv_onednn;
using tag = dnnl::memory::format_tag;

// The per-thread buffers of one call, by role.
enum Role { IN0, IN1, OUT, OUT_PLAIN, SCRATCH, REORDER_SCRATCH, W_DOUBLED, W_PREPARED, ROLES };
GrowingBuffer& thread_buffer(Role r) {
  thread_local GrowingBuffer buffers[ROLES];
  return buffers[r];
}

// INT8 weights below VNNI are handed to oneDNN doubled (see conv_onednn.h).
bool int8_weights_doubled(Precision type) { return type == Precision::INT8 && cpu_isa_active() < CpuIsa::AVX512; }

// A cached reorder, with this thread's scratchpad.
void run_reorder(const Reorder& r, dnnl::stream& stream, const memory& from, const memory& to) {
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  const size_t bytes = r.scratch.get_size();
  if (bytes > 0) {
    void* scratch = thread_buffer(REORDER_SCRATCH).get(bytes);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(r.scratch, onednn_cpu_engine(), scratch));
  }
  r.prim.execute(stream, args);
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

std::string conv_onednn_impl(const ConvOnednnCall& call) { return isa_allows(call) ? cached_primitive(call).impl : ""; }

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
    return {s.n, s.o, s.oh * s.ow, call.x_scale * halve, call.w_scales, call.bias,
            call.relu, call.relu_mask, call.pool ? s.ow : 0, call.pool_argmax};
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

// The index of a call's weights among its two inputs (run_call's in_ptr).
int weights_input(const ConvOnednnCall& call) {
  return call.op == ConvOnednnOp::BACKWARD_DATA && call.type == Precision::INT8 ? 0 : 1;
}

constexpr const memory* NONE_PREPARED[2] = {nullptr, nullptr};

// Runs a supported call; `prepared`: per input, that input already in the primitive's layout
// (dy shared by the two backward convolutions, INT8 weights shared by a call's runs of samples),
// or nullptr.
void run_call(const ConvOnednnCall& call, const memory* const prepared[2]) {
  const ConvPrimitive& p = cached_primitive(call);
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
    if (prepared[i] != nullptr) {
      args.emplace(in_arg[i], *prepared[i]);
      continue;
    }
    memory user(p.in_user[i], eng, const_cast<void*>(in_ptr[i]));
    if (!p.in_reordered[i]) {
      args.emplace(in_arg[i], user);
      continue;
    }
    memory blocked(p.in_prim[i], eng, thread_buffer(Role(IN0 + i)).get(p.in_prim[i].get_size()));
    if (p.in_nhwc_bytes[i]) {
      const memory::dims d = p.in_user[i].dims();  // (N, C, H, W)
      int8_nchw_to_nhwc(static_cast<const int8_t*>(in_ptr[i]), d[0], d[1], d[2] * d[3],
                        static_cast<int8_t*>(blocked.get_data_handle()));
    } else {
      run_reorder(p.in_reorder[i], stream, user, blocked);
    }
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
  if (int8 && p.out_nhwc) {  // one pass: NHWC -> NCHW with the scales and the bias (and the pooling)
    stream.wait();
    const auto* sums = static_cast<const float*>(out_prim.get_data_handle());
    if (call.pool) int8_nhwc_to_nchw_pooled(sums, int8_output_of(call), out);
    else int8_nhwc_to_nchw(sums, int8_output_of(call), out);
    return;
  }
  if (call.pool) throw std::logic_error("conv_onednn_run: pooling asked of a call whose sums are not NHWC");
  if (p.out_reordered) run_reorder(p.out_reorder, stream, out_prim, out_user);
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

// Splits `samples` samples, from `first`, into `pieces` runs of sizes that differ by at most one.
struct SampleRuns {
  int64_t first, samples, pieces;
  int64_t begin(int64_t i) const { return first + i * (samples / pieces) + std::min(i, samples % pieces); }
  int64_t size(int64_t i) const { return samples / pieces + (i < samples % pieces ? 1 : 0); }
};

// Runs `call` on the samples of `runs`, one oneDNN call per run; in_bytes and out_floats: a
// sample's input (s8) and output (FP32) sizes. The weights are reordered once, into the layout of
// the first run that wants them reordered, and handed to every run whose primitive wants that
// layout (the runs differ only in their sample count, which rarely changes it): on cpu-avx2 the zoo CNN's conv4 reordered its
// 37 K weights (with their compensation sums) seven times a step each way, 0.5 ms in all.
void run_sample_runs(const ConvOnednnCall& call, const SampleRuns& runs, int64_t in_bytes, int64_t out_floats) {
  const bool forward = call.op == ConvOnednnOp::FORWARD;
  const int64_t written = call.pool ? call.shape.o * (call.shape.oh / 2) * (call.shape.ow / 2) : out_floats;
  const int wi = weights_input(call);
  memory weights;  // the weights in the layout of the first run that reorders them
  for (int64_t i = 0; i < runs.pieces; ++i) {
    const int64_t s0 = runs.begin(i);
    ConvOnednnCall c = call;
    c.shape.n = runs.size(i);
    (forward ? c.x : c.dy) = static_cast<const int8_t*>(forward ? call.x : call.dy) + s0 * in_bytes;
    c.out = call.out + s0 * written;
    if (call.relu_mask != nullptr) c.relu_mask = call.relu_mask + s0 * out_floats;
    if (call.pool_argmax != nullptr) c.pool_argmax = call.pool_argmax + s0 * written;
    const ConvPrimitive& p = cached_primitive(c);
    const memory* prepared[2] = {nullptr, nullptr};
    if (p.in_reordered[wi]) {
      if (!weights) {  // the first run that reorders them
        dnnl::engine& eng = onednn_cpu_engine();
        weights = memory(p.in_prim[wi], eng, thread_buffer(W_PREPARED).get(p.in_prim[wi].get_size()));
        run_reorder(p.in_reorder[wi], thread_stream(), memory(p.in_user[wi], eng, const_cast<void*>(c.w)), weights);
      }
      if (weights.get_desc() == p.in_prim[wi]) prepared[wi] = &weights;
    }
    run_call(c, prepared);
  }
}

// Whether oneDNN has a kernel for call c run by a thread alone (threads > 1: the one-thread
// primitive a team's thread will build; checked under the team's count, the check would build a
// primitive that never runs).
bool supported_per_thread(const ConvOnednnCall& c, int threads) {
  if (threads == 1) return c.pool ? conv_onednn_pools(c) : conv_onednn_supports(c);
  const int team = omp_get_max_threads();
  omp_set_num_threads(1);
  const bool supported = c.pool ? conv_onednn_pools(c) : conv_onednn_supports(c);
  omp_set_num_threads(team);
  return supported;
}

// An INT8 call in runs of samples whose FP32 sums stay in L2 (1 MiB of them) until the output
// transform reads them; the whole call when a run's shape has no kernel. Measured on Zen 5,
// cpu-avx2, the zoo CNN: conv2's forward 9.8 -> 9.2 ms (256 KiB runs: 10.0, 4 MiB: 9.4).
// With several threads each runs oneDNN alone over its own samples, in such runs: oneDNN's
// threads, sharing each run of ten or so samples, scaled to 0.58 of one thread's time where the
// split scales to 0.5x. The int32 sums are exact and the output transform is per entry, so the
// bits do not depend on the split.
void run_int8_in_chunks(const ConvOnednnCall& whole) {
  ConvOnednnCall call = whole;
  call.w = int8_weights_for_onednn(whole);
  const ConvOnednnShape& s = call.shape;
  const bool forward = call.op == ConvOnednnOp::FORWARD;
  const int64_t in_bytes = forward ? s.c * s.h * s.w : s.o * s.oh * s.ow;  // per sample, s8
  const int64_t out_floats = forward ? s.o * s.oh * s.ow : s.c * s.h * s.w;
  constexpr int64_t SUMS_BYTES = int64_t{1} << 20;
  const int64_t chunk = std::max<int64_t>(1, SUMS_BYTES / (out_floats * 4));
  const int threads = omp_in_parallel() ? 1 : int(std::clamp<int64_t>(s.n / chunk, 1, omp_get_max_threads()));
  // Every thread's runs, and whether oneDNN has a kernel for each of their shapes.
  std::vector<SampleRuns> runs;
  bool supported = true;
  for (int t = 0; t < threads; ++t) {
    const int64_t first = s.n * t / threads, samples = s.n * (t + 1) / threads - first;
    runs.push_back({first, samples, (samples + chunk - 1) / chunk});
    for (int64_t i = 0; i < std::min<int64_t>(runs.back().pieces, 2) && supported; ++i) {
      ConvOnednnCall c = call;
      c.shape.n = runs.back().size(i == 0 ? 0 : runs.back().pieces - 1);  // the largest and smallest
      supported = supported_per_thread(c, threads);
    }
  }
  if (!supported) return run_call(call, NONE_PREPARED);
  if (threads == 1) return run_sample_runs(call, runs[0], in_bytes, out_floats);
  run_parts_one_thread_each(threads, [&](int t) { run_sample_runs(call, runs[size_t(t)], in_bytes, out_floats); });
}

}  // namespace

bool conv_onednn_pools(const ConvOnednnCall& call) {
  return call.op == ConvOnednnOp::FORWARD && call.type == Precision::INT8 && call.shape.oh >= 2 &&
         call.shape.ow >= 2 && conv_onednn_supports(call) && cached_primitive(call).out_nhwc;
}

void conv_onednn_run(const ConvOnednnCall& call) {
  check_supported(call);
  if (call.pool && !conv_onednn_pools(call))
    throw std::logic_error("conv_onednn_run: this call cannot pool in its output pass; check conv_onednn_pools "
                           "first and pool the written output instead");
  if (call.type == Precision::INT8) return run_int8_in_chunks(call);
  run_call(call, NONE_PREPARED);
}

void conv_onednn_run_backward(const ConvOnednnCall& data, const ConvOnednnCall& weights) {
  check_supported(data);
  check_supported(weights);
  const ConvPrimitive& pd = cached_primitive(data);
  const ConvPrimitive& pw = cached_primitive(weights);
  if (data.dy != weights.dy || !pd.in_reordered[1] || !pw.in_reordered[1] || pd.in_prim[1] != pw.in_prim[1]) {
    run_call(data, NONE_PREPARED);
    run_call(weights, NONE_PREPARED);
    return;
  }
  // Both want dy in the same blocked layout: reorder it once (a buffer of its own role).
  thread_local GrowingBuffer dy_buffer;
  dnnl::engine& eng = onednn_cpu_engine();
  memory user(pd.in_user[1], eng, const_cast<void*>(data.dy));
  memory blocked(pd.in_prim[1], eng, dy_buffer.get(pd.in_prim[1].get_size()));
  run_reorder(pd.in_reorder[1], thread_stream(), user, blocked);
  const memory* const dy_prepared[2] = {nullptr, &blocked};
  run_call(data, dy_prepared);
  run_call(weights, dy_prepared);
}

}  // namespace qsync
