// File: kernels/cpu/onednn_matmul.cpp
// oneDNN matmul primitives of the cpu GEMM backend: built, cached and run (onednn_matmul.h).
#include "kernels/cpu/onednn_matmul.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "kernels/cpu/gemm_operand_pack.h"
#include "kernels/cpu/onednn_host.h"
#include "kernels/gemm.h"

namespace qsync::onednn_matmul {

using dnnl::memory;

bool is_ref_impl(const std::string& impl) { return impl.empty() || impl.rfind("ref", 0) == 0; }

namespace {

memory::desc matrix_desc(int64_t rows, int64_t cols, dt type, bool transposed, int64_t ld) {
  // Logical (rows, cols); a transposed operand is stored (cols, rows) with row stride ld.
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

// The bias of a (m, n) product: one FP32 row, broadcast down the columns.
memory::desc bias_desc(int64_t n) { return memory::desc({1, n}, dt::f32, memory::dims{n, 1}); }

// Builds the primitive, or returns nullopt-like empty impl when oneDNN rejects it.
Matmul matmul_create(const MatmulKey& key) {
  const auto a = matrix_desc(key.m, key.k, key.a_type, key.ta, key.lda);
  const auto b = matrix_desc(key.k, key.n, key.b_type, key.tb, key.ldb);
  const auto c = matrix_desc(key.m, key.n, key.c_type, false, key.ldc);
  dnnl::primitive_attr attr;
  // The caller brings the scratchpad (one per thread): the same cached primitive may run on several
  // threads at once (tensor-parallel ranks as threads), and a library-owned scratchpad is shared.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.scale_mask >= 0) attr.set_output_scales(key.scale_mask, {DNNL_RUNTIME_F32_VAL});
  if (key.a_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  Matmul mm;
  try {
    const dnnl::matmul::desc desc = key.bias ? dnnl::matmul::desc(a, b, bias_desc(key.n), c)
                                             : dnnl::matmul::desc(a, b, c);
    mm.pd = dnnl::matmul::primitive_desc(desc, attr, onednn_cpu_engine());
    mm.prim = dnnl::matmul(mm.pd);
    mm.impl = mm.pd.impl_info_str();
  } catch (const dnnl::error&) {
    mm.impl.clear();
  }
  return mm;
}

}  // namespace

const Matmul& matmul_cached(const MatmulKey& key) {
  static std::mutex mutex;
  static std::map<MatmulKey, Matmul> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, matmul_create(key)).first;
  return it->second;
}

void run_matmul(const MatmulKey& key, const MatmulOperands& o, int64_t j0) {
  const Matmul& mm = matmul_cached(key);
  if (mm.impl.empty())
    throw GemmError("gemm: oneDNN has no matmul for " + std::string(o.a_precision) +
                    " with these layouts; use the ref backend");
  dnnl::engine& eng = onednn_cpu_engine();
  thread_local dnnl::stream stream(eng);
  const auto* b = static_cast<const uint8_t*>(o.b) + j0 * (key.tb ? key.ldb : 1) * o.b_elem;
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(mm.pd.src_desc(), eng, const_cast<void*>(o.a))},
      {DNNL_ARG_WEIGHTS, memory(mm.pd.weights_desc(), eng, const_cast<uint8_t*>(b))},
      {DNNL_ARG_DST, memory(mm.pd.dst_desc(), eng, static_cast<uint8_t*>(o.c) + j0 * 4)},
  };
  if (key.bias) args.emplace(DNNL_ARG_BIAS, memory(bias_desc(key.n), eng, const_cast<float*>(o.bias + j0)));
  if (key.scale_mask >= 0) {
    const bool per_column = key.scale_mask == 2;
    const memory::desc sd({per_column ? key.n : 1}, dt::f32, memory::dims{1});
    args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, memory(sd, eng, const_cast<float*>(o.scales + (per_column ? j0 : 0))));
  }
  int32_t src_zero_point = gemm_pack::U8_SHIFT;
  if (key.a_zero_point) {
    const memory::desc zd({1}, dt::s32, memory::dims{1});
    args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, memory(zd, eng, &src_zero_point));
  }
  // This thread's scratchpad, grown to the largest any call of it needed (never shared).
  thread_local GrowingBuffer scratchpad;
  const size_t scratch_bytes = mm.pd.scratchpad_desc().get_size();
  if (scratch_bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(mm.pd.scratchpad_desc(), eng, scratchpad.get(scratch_bytes)));
  mm.prim.execute(stream, args);
  stream.wait();
}

}  // namespace qsync::onednn_matmul
