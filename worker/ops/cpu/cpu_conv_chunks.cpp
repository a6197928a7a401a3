// File: worker/ops/cpu/cpu_conv_chunks.cpp
// CpuOps: the im2col path of Conv2d's backward (cpu_conv.cpp's conv2d_backward, when oneDNN does
// not compute the layer's type: int8-all, fp8; FP32 and 16-bit types on classes whose oneDNN
// lacks them, such as cpu-sse41), chunk by chunk of samples. Per chunk: dy_cm
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
// caller's thread: one team, chunks of the cache's size, each product accumulated into dW by its
// GEMM (beta 1).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
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

// Runs `body` under the op clock `layer` + `op` when the op times are taken (a team of one only:
// the clocks' table belongs to the caller's thread); the name is built only then.
template <class Body>
void timed(StepContext* ctx, const std::string& layer, const char* op, Body&& body) {
  if (ctx == nullptr) return body();
  OpClock clock(*ctx, layer + op);
  body();
}

// One conv2d_backward_chunks call: its shapes, its team's buffers, and the chunk and wave steps.
class ConvChunks {
 public:
  ConvChunks(CpuOps& ops, const Conv2dBackward& a, const ConvGeometry& g, const Tensor& dy, const Tensor& gq,
             bool dx_on_im2col, int64_t largest_chunk, StepContext& ctx, const std::string& layer)
      : ops_(ops), a_(a), g_(g), gq_(gq), dx_on_im2col_(dx_on_im2col), layer_(layer) {
    batch_ = dy.dim(0), hw_ = g.oh * g.ow, ckk_ = g.c * g.k * g.k, o_ = a.w->dim(0);
    chunk_ = gq.defined() ? equal_chunk(batch_, largest_chunk) : std::min(batch_, largest_chunk);
    chunks_ = (batch_ + chunk_ - 1) / chunk_;
    team_ = gq.defined() ? int(std::clamp<int64_t>(chunks_, 1, omp_get_max_threads())) : 1;
    per_thread_ = team_ > 1 ? std::min<int64_t>(CHUNKS_PER_THREAD, (chunks_ + team_ - 1) / team_) : 1;
    per_wave_ = team_ * per_thread_;
    const Precision g_type = gq.defined() ? gq.precision() : Precision::FP32;
    g_elem_ = size_t(precision_bytes(g_type));
    g_src_ = static_cast<const uint8_t*>(gq.defined() ? gq.data() : dy.data());
    clocks_ = team_ == 1 ? &ctx : nullptr;
    const int64_t span = chunk_ * hw_;  // a chunk's columns
    // Each thread's buffers: (team, O, span) gradient by channel, (team, CKK, span) columns and
    // column gradients; (per_wave, O, CKK) the wave's chunks' dW products.
    dy_cm_ = Tensor::empty({team_, o_, span}, g_type, ctx.memory, layer + " gradient (channel-major)");
    if (dx_on_im2col)
      dcols_ = Tensor::empty({team_, ckk_, span}, Precision::FP32, ctx.memory, layer + " column gradient");
    cols_ = Tensor::empty({team_, ckk_, span}, a.x->precision(), ctx.memory, layer + " im2col");
    if (gq.defined())
      parts_ = Tensor::empty({per_wave_, o_, ckk_}, Precision::FP32, ctx.memory, layer + " chunk weight gradients");
  }

  int team() const { return team_; }

  // Thread t's waves: its chunks of each, then its rows of dW take the wave's parts (the barriers
  // bind to the team's region; alone, to none). The first error is kept; later chunks are skipped.
  void waves(int t) {
    for (int64_t first = 0; first < chunks_; first += per_wave_) {
      for (int64_t slot = t * per_thread_; slot < (t + 1) * per_thread_ && first + slot < chunks_; ++slot) {
        if (failed_.load()) break;
        try {
          run_chunk(first + slot, t, slot);
        } catch (...) {
#pragma omp critical(qsync_conv_chunk_error)
          if (!error_) error_ = std::current_exception();
          failed_ = true;
        }
      }
#pragma omp barrier
      add_parts(first, t);
#pragma omp barrier
    }
  }

  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Chunk c (samples [c * chunk, ...)) on thread t's buffers, its dW product into part `slot`.
  void run_chunk(int64_t c, int t, int64_t slot) {
    const int64_t s0 = c * chunk_, n = std::min(chunk_, batch_ - s0), span = chunk_ * hw_;
    Tensor dy_n = dy_cm_.view(t * o_ * span, {o_, n * hw_});
    auto* rows = static_cast<uint8_t*>(dy_n.data());
    for (int64_t oc = 0; oc < o_; ++oc)
      for (int64_t s = 0; s < n; ++s)
        std::memcpy(rows + size_t(oc * n * hw_ + s * hw_) * g_elem_,
                    g_src_ + size_t(((s0 + s) * o_ + oc) * hw_) * g_elem_, size_t(hw_) * g_elem_);
    if (gq_.defined()) {
      dy_n.scale_mode = gq_.scale_mode;
      dy_n.scales = gq_.scales;
    }
    const Tensor gc = gq_.defined() ? dy_n : a_.cast_dy(dy_n, nullptr, -1.0f);  // (O, n*H'W') backward precision
    if (dx_on_im2col_) {
      Tensor dcols_n = dcols_.view(t * ckk_ * span, {ckk_, n * hw_});
      timed(clocks_, layer_, ".gemm_input_grad",
            [&] { ops_.matmul(*a_.w, Transpose::YES, gc, Transpose::NO, dcols_n, {}); });
      timed(clocks_, layer_, ".col2im", [&] { col2im_add(dcols_n.f32(), s0, n, g_, a_.dx->f32()); });
    }
    Tensor cols_n = cols_.view(t * ckk_ * span, {ckk_, n * hw_});
    cols_n.scale_mode = a_.x->scale_mode;
    cols_n.scales = a_.x->scales;
    const int elem = precision_bytes(a_.x->precision());
    timed(clocks_, layer_, ".im2col", [&] { im2col(a_.x->data(), elem, s0, n, g_, cols_n.data()); });
    // A gradient cast per chunk (one team): the product accumulates into dW itself, as one GEMM.
    MatmulOptions accumulate;
    accumulate.beta = 1.0f;
    Tensor part = gq_.defined() ? parts_.view(slot * o_ * ckk_, {o_, ckk_}) : *a_.dw;
    timed(clocks_, layer_, ".gemm_weight_grad", [&] {
      ops_.matmul(gc, Transpose::NO, cols_n, Transpose::YES, part, gq_.defined() ? MatmulOptions{} : accumulate);
    });
  }

  // dW rows of thread t += the wave's parts, in chunk order.
  void add_parts(int64_t first, int t) {
    if (!gq_.defined()) return;  // the products went into dW (run_chunk)
    const int64_t in_wave = std::min<int64_t>(per_wave_, chunks_ - first), share = (o_ + team_ - 1) / team_;
    const int64_t i0 = std::min(o_, t * share), i1 = std::min(o_, i0 + share);
    float* dw = a_.dw->f32();
    for (int64_t u = 0; u < in_wave; ++u) {
      const float* part = parts_.f32() + u * o_ * ckk_;
      for (int64_t j = i0 * ckk_; j < i1 * ckk_; ++j) dw[j] += part[j];
    }
  }

  CpuOps& ops_;
  const Conv2dBackward& a_;
  const ConvGeometry& g_;
  const Tensor& gq_;
  const bool dx_on_im2col_;
  const std::string& layer_;
  int64_t batch_, hw_, ckk_, o_, chunk_, chunks_, per_thread_, per_wave_;
  int team_;
  size_t g_elem_;
  const uint8_t* g_src_;
  StepContext* clocks_;
  Tensor dy_cm_, dcols_, cols_, parts_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

}  // namespace

void CpuOps::conv2d_backward_chunks(const Conv2dBackward& a, const ConvGeometry& g, const Tensor& dy,
                                    const Tensor& gq, bool dx_on_im2col, int64_t largest_chunk, StepContext& ctx,
                                    const std::string& layer) {
  ConvChunks chunks(*this, a, g, dy, gq, dx_on_im2col, largest_chunk, ctx, layer);
  if (chunks.team() == 1) {
    chunks.waves(0);  // no region of our own: the chunk's ops run their own teams (one nested in a
                      // region of one thread would start fresh threads every time)
  } else {
    OpClock clock(ctx, layer + ".backward_chunks");  // the team's chunks as one op
#pragma omp parallel num_threads(chunks.team())
    {
      omp_set_num_threads(1);  // the chunk's oneDNN calls run on this thread alone
      chunks.waves(omp_get_thread_num());
    }
  }
  chunks.rethrow();
}

}  // namespace qsync
