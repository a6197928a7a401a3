// File: worker/ops/cpu/cpu_conv_chunks.cpp
// CpuOps: the im2col path of Conv2d's backward (cpu_conv.cpp's conv2d_backward, when oneDNN does
// not compute the layer's type: int8-all, fp8), chunk by chunk of samples. Per chunk: dy_cm
// (O, S*H'W') = the chunk's gradient by channel; dcols = W^T dy_cm and dx += col2im(dcols) (when
// oneDNN did not compute dx); cols = im2col(x); the chunk's dW product dy_cm cols^T (O, CKK).
//
// With the gradient cast whole (one scale for the tensor), the threads take whole chunks, a wave
// at a time: in a wave each thread runs up to CHUNKS_PER_THREAD consecutive chunks alone, on its
// own buffers, so it reads only rows its own core copied and gathered (threads splitting each
// chunk's product read rows the other core wrote, and forked three times a chunk). Each chunk's
// product lands in its own part; after the wave the parts are added onto dW in chunk order, rows
// split over the threads. dW takes the chunks' products one after another whatever the team, so
// its bits do not depend on the thread count. A gradient cast per chunk (cast_dy) runs on the
// caller's thread: one team.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include "worker/layer.h"
#include "worker/ops/cpu/cpu_kernels.h"
#include "worker/ops/cpu_ops.h"

namespace qsync {
namespace {

// Samples per chunk for a batch and the largest chunk the caches allow: equal chunks, their count
// rounded up to a multiple of 4 (of 2 below 4), so that a team of 2 or 4 threads fills its last
// wave; the count depends on the shapes alone, never on the threads (the chunks' order fixes dW's
// sums).
int64_t equal_chunk(int64_t batch, int64_t largest) {
  int64_t chunks = (batch + largest - 1) / largest;
  if (chunks > 1) chunks = chunks < 4 ? (chunks + 1) / 2 * 2 : (chunks + 3) / 4 * 4;
  chunks = std::min(chunks, batch);
  return (batch + chunks - 1) / chunks;
}

// Chunks one thread takes in turn within a wave (at most).
constexpr int64_t CHUNKS_PER_THREAD = 4;

// Runs `body` under an op clock when the op times are taken (a team of one only: the clocks'
// table belongs to the caller's thread).
void timed(StepContext* ctx, const std::string& name, const std::function<void()>& body) {
  if (ctx == nullptr) return body();
  OpClock clock(*ctx, name);
  body();
}

}  // namespace

void CpuOps::conv2d_backward_chunks(const Conv2dBackward& a, const ConvGeometry& g, const Tensor& dy,
                                    const Tensor& gq, bool dx_on_im2col, int64_t largest_chunk, StepContext& ctx,
                                    const std::string& layer) {
  const Tensor& xb = *a.x;
  const Tensor& wb = *a.w;
  const int64_t batch = dy.dim(0), hw = g.oh * g.ow, ckk = g.c * g.k * g.k, o = wb.dim(0);
  const bool cast_whole = gq.defined();
  const int64_t chunk = equal_chunk(batch, largest_chunk), chunks = (batch + chunk - 1) / chunk;
  const int team = cast_whole ? int(std::clamp<int64_t>(chunks, 1, omp_get_max_threads())) : 1;
  // Chunks a thread runs one after another in a wave: fewer waits at the wave's end.
  const int64_t per_thread = team > 1 ? std::min<int64_t>(CHUNKS_PER_THREAD, (chunks + team - 1) / team) : 1;
  const int64_t per_wave = team * per_thread;
  const int elem = precision_bytes(xb.precision());
  const Precision g_type = cast_whole ? gq.precision() : Precision::FP32;
  const size_t g_elem = size_t(precision_bytes(g_type));
  const int64_t span = chunk * hw;  // a chunk's columns
  // Each thread's buffers: (team, O, span) gradient by channel, (team, CKK, span) columns and
  // column gradients; (per_wave, O, CKK) the wave's chunks' dW products.
  Tensor dy_cm = Tensor::empty({team, o, span}, g_type, ctx.memory, layer + " gradient (channel-major)");
  Tensor dcols = dx_on_im2col ? Tensor::empty({team, ckk, span}, Precision::FP32, ctx.memory, layer + " column gradient")
                              : Tensor();
  Tensor cols = Tensor::empty({team, ckk, span}, xb.precision(), ctx.memory, layer + " im2col");
  Tensor parts = Tensor::empty({per_wave, o, ckk}, Precision::FP32, ctx.memory, layer + " chunk weight gradients");
  const auto* g_src = static_cast<const uint8_t*>(cast_whole ? gq.data() : dy.data());
  StepContext* clocks = team == 1 ? &ctx : nullptr;

  auto run_chunk = [&](int64_t c, int t, int64_t slot) {
    const int64_t s0 = c * chunk, n = std::min(chunk, batch - s0);
    Tensor dy_n = dy_cm.view(t * o * span, {o, n * hw});
    auto* rows = static_cast<uint8_t*>(dy_n.data());
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t s = 0; s < n; ++s)
        std::memcpy(rows + size_t(oc * n * hw + s * hw) * g_elem, g_src + size_t(((s0 + s) * o + oc) * hw) * g_elem,
                    size_t(hw) * g_elem);
    if (cast_whole) {
      dy_n.scale_mode = gq.scale_mode;
      dy_n.scales = gq.scales;
    }
    const Tensor gc = cast_whole ? dy_n : a.cast_dy(dy_n, nullptr, -1.0f);  // (O, n*H'W') backward precision
    if (dx_on_im2col) {
      Tensor dcols_n = dcols.view(t * ckk * span, {ckk, n * hw});
      timed(clocks, layer + ".gemm_input_grad", [&] { matmul(wb, Transpose::YES, gc, Transpose::NO, dcols_n, {}); });
      timed(clocks, layer + ".col2im", [&] { col2im_add(dcols_n.f32(), s0, n, g, a.dx->f32()); });
    }
    Tensor cols_n = cols.view(t * ckk * span, {ckk, n * hw});
    cols_n.scale_mode = xb.scale_mode;
    cols_n.scales = xb.scales;
    timed(clocks, layer + ".im2col", [&] { im2col(xb.data(), elem, s0, n, g, cols_n.data()); });
    Tensor part = parts.view(slot * o * ckk, {o, ckk});
    timed(clocks, layer + ".gemm_weight_grad", [&] { matmul(gc, Transpose::NO, cols_n, Transpose::YES, part, {}); });
  };

  // dW rows [i0, i1) += the wave's parts, in chunk order.
  float* dw = a.dw->f32();
  auto add_parts = [&](int64_t first, int t) {
    const int64_t in_wave = std::min<int64_t>(per_wave, chunks - first), share = (o + team - 1) / team;
    const int64_t i0 = std::min(o, t * share), i1 = std::min(o, i0 + share);
    for (int64_t u = 0; u < in_wave; ++u) {
      const float* part = parts.f32() + u * o * ckk;
      for (int64_t j = i0 * ckk; j < i1 * ckk; ++j) dw[j] += part[j];
    }
  };

  std::exception_ptr error;
  std::atomic<bool> failed{false};
  // Thread t's waves (the barriers bind to the team's region; alone, to none).
  auto waves = [&](int t) {
    for (int64_t first = 0; first < chunks; first += per_wave) {
      for (int64_t slot = t * per_thread; slot < (t + 1) * per_thread && first + slot < chunks; ++slot) {
        if (failed.load()) break;
        try {
          run_chunk(first + slot, t, slot);
        } catch (...) {
#pragma omp critical(qsync_conv_chunk_error)
          if (!error) error = std::current_exception();
          failed = true;
        }
      }
#pragma omp barrier
      add_parts(first, t);
#pragma omp barrier
    }
  };
  if (team == 1) {
    waves(0);  // no region of our own: the chunk's ops run their own teams (one nested in a
               // region of one thread would start fresh threads every time)
  } else {
    OpClock clock(ctx, layer + ".backward_chunks");  // the team's chunks as one op
#pragma omp parallel num_threads(team)
    {
      omp_set_num_threads(1);  // the chunk's oneDNN calls run on this thread alone
      waves(omp_get_thread_num());
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace qsync
