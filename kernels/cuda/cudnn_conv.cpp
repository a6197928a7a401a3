// File: kernels/cuda/cudnn_conv.cpp
// CudnnConvEngine on cuDNN's backend API (see cudnn_conv.h). Host code only (no kernels), so it
// compiles as C++. The operation graph's and the execution plan's handle attributes are
// deprecated in cuDNN 9.19 in favour of device-property descriptors, but they are what every
// cuDNN 9 release reads (the device may carry an older 9.x): they are set with the deprecation
// warning silenced locally.
#include "kernels/cuda/cudnn_conv.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace qsync {
namespace {

void cudnn_check(cudnnStatus_t st, const char* what, const char* file, int line) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           cudnnGetErrorString(st) + (detail[0] ? std::string(" (") + detail + ")" : std::string()));
}
#define QSYNC_CUDNN_CHECK(call) cudnn_check((call), #call, __FILE__, __LINE__)

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    QSYNC_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const T* values) {
    QSYNC_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void finalize() { QSYNC_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(Precision p) {
  switch (p) {
    case Precision::FP32: return CUDNN_DATA_FLOAT;
    case Precision::BF16: return CUDNN_DATA_BFLOAT16;
    case Precision::FP16: return CUDNN_DATA_HALF;
    default:
      throw std::invalid_argument(std::string("cudnn conv: ") + precision_name(p) +
                                  " tensors are not convolved by cuDNN here (fp32, bf16, fp16 only)");
  }
}

int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 256;
  while (alignment > 1 && a % uint64_t(alignment) != 0) alignment /= 2;
  return alignment;
}

Desc tensor(int64_t uid, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w, int64_t alignment) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w};
  const int64_t strides[4] = {c * h * w, h * w, w, 1};  // packed NCHW / KCRS
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t.finalize();
  return t;
}

constexpr int64_t UID_X = 1, UID_W = 2, UID_Y = 3;

struct Key {
  int op, type;
  bool tf32;
  int64_t n, c, h, w, k, kernel, stride, pad, oh, ow;
  int64_t align_in1, align_in2, align_out;
  float alpha, beta;  // baked into the operation descriptor
  auto tie() const {
    return std::tie(op, type, tf32, n, c, h, w, k, kernel, stride, pad, oh, ow, align_in1, align_in2, align_out, alpha,
                    beta);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  std::vector<Desc> keep;  // tensors, convolution, operation, graph, engine config: alive with the plan
  Desc plan;
  int64_t workspace = 0;
  std::string notes;
};

bool has(const std::vector<int>& v, int x) {
  for (int e : v)
    if (e == x) return true;
  return false;
}

}  // namespace

struct CudnnConvEngine::Impl {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  std::mutex mu;
  std::map<Key, std::unique_ptr<Plan>> plans;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  static Key key_of(const CudnnConvCall& c) {
    const CudnnConvShape& s = c.shape;
    const void* in1 = c.op == CudnnConvOp::BACKWARD_DATA ? c.w : c.x;
    const void* in2 = c.op == CudnnConvOp::FORWARD ? c.w : c.dy;
    return {int(c.op), int(c.type), c.allow_tf32 && c.type == Precision::FP32, s.n, s.c, s.h, s.w, s.k, s.kernel,
            s.stride, s.pad, s.oh, s.ow, alignment_of(in1), alignment_of(in2), alignment_of(c.out), c.alpha, c.beta};
  }

  std::unique_ptr<Plan> build(const CudnnConvCall& call, const Key& key);
  Plan& plan_for(const CudnnConvCall& call) {
    const Key key = key_of(call);
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, build(call, key)).first;
    return *it->second;
  }
};

std::unique_ptr<Plan> CudnnConvEngine::Impl::build(const CudnnConvCall& call, const Key& key) {
  const CudnnConvShape& s = call.shape;
  const cudnnDataType_t type = data_type(call.type);
  auto p = std::make_unique<Plan>();
  const bool fwd = call.op == CudnnConvOp::FORWARD, data = call.op == CudnnConvOp::BACKWARD_DATA;
  // x (N, C, H, W), w (K, C, R, S), y (N, K, OH, OW): which pointer plays which role depends on the op.
  const int64_t ax = fwd || !data ? key.align_in1 : key.align_out;
  const int64_t aw = fwd ? key.align_in2 : (data ? key.align_in1 : key.align_out);
  const int64_t ay = fwd ? key.align_out : key.align_in2;
  p->keep.push_back(tensor(UID_X, type, s.n, s.c, s.h, s.w, ax));
  p->keep.push_back(tensor(UID_W, type, s.k, s.c, s.kernel, s.kernel, aw));
  p->keep.push_back(tensor(UID_Y, type, s.n, s.k, s.oh, s.ow, ay));
  cudnnBackendDescriptor_t x = p->keep[0].get(), w = p->keep[1].get(), y = p->keep[2].get();

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t dims = 2, pads[2] = {s.pad, s.pad}, dilations[2] = {1, 1}, strides[2] = {s.stride, s.stride};
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilations);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides);
  conv.finalize();
  cudnnBackendDescriptor_t conv_d = conv.get();
  p->keep.push_back(std::move(conv));

  const float alpha = call.alpha, beta = call.beta;
  Desc op(fwd ? CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
              : (data ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                      : CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR));
  if (fwd) {
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  } else if (data) {
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  } else {
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  }
  op.finalize();
  cudnnBackendDescriptor_t op_d = op.get();
  p->keep.push_back(std::move(op));

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op_d);
  graph.finalize();
  cudnnBackendDescriptor_t graph_d = graph.get();
  p->keep.push_back(std::move(graph));

  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph_d);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  heur.finalize();
  int64_t count = 0;
  QSYNC_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                             &count, nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    QSYNC_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                               count, &got, raw.data()));
  // Two passes: engines without run-time compilation first.
  std::string rejected;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t i = 0; i < got; ++i) {
      Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t engine_d = engine.get();
      int64_t n = 0;
      if (cudnnBackendGetAttribute(raw[size_t(i)], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &engine_d) != CUDNN_STATUS_SUCCESS)
        continue;
      cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
      cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
      int64_t nn = 0, nb = 0;
      (void)cudnnBackendGetAttribute(engine_d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes);
      (void)cudnnBackendGetAttribute(engine_d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behavior);
      std::vector<int> note_list(notes, notes + nn), behavior_list(behavior, behavior + nb);
      if (has(note_list, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) || has(note_list, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
        continue;
      if (call.type == Precision::FP32 && !key.tf32 && has(note_list, CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) continue;
      const bool runtime_compiled = has(behavior_list, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION);
      if (runtime_compiled != (pass == 1)) continue;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[size_t(i)]);
      if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) {
        rejected += " #" + std::to_string(i) + " (did not finalize)";
        continue;
      }
      int64_t ws = 0;
      QSYNC_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                 1, &n, &ws));
      int64_t global = -1;
      (void)cudnnBackendGetAttribute(engine_d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &global);
      p->notes = "engine " + std::to_string(global) + (has(note_list, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ? " tensor-core" : "") +
                 (runtime_compiled ? " runtime-compiled" : "") + ", heuristic rank " + std::to_string(i);
      p->plan = std::move(plan);
      p->workspace = ws;
      p->keep.push_back(std::move(cfgs[size_t(i)]));
      p->keep.push_back(std::move(engine));
      p->keep.push_back(std::move(heur));
      return p;
    }
#pragma GCC diagnostic pop
  throw std::runtime_error(std::string("cudnn conv: no deterministic engine for the ") +
                           (fwd ? "forward" : (data ? "backward-data" : "backward-filter")) + " of a " +
                           precision_name(call.type) + " convolution (N " + std::to_string(s.n) + ", C " +
                           std::to_string(s.c) + ", " + std::to_string(s.h) + "x" + std::to_string(s.w) + ", K " +
                           std::to_string(s.k) + ", kernel " + std::to_string(s.kernel) + ", stride " +
                           std::to_string(s.stride) + ", pad " + std::to_string(s.pad) + "): " + std::to_string(got) +
                           " heuristic configurations" + (rejected.empty() ? "" : ";" + rejected) +
                           "; plan another precision for this layer");
}

CudnnConvEngine::CudnnConvEngine(void* stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = static_cast<cudaStream_t>(stream);
  QSYNC_CUDNN_CHECK(cudnnCreate(&impl_->handle));
  QSYNC_CUDNN_CHECK(cudnnSetStream(impl_->handle, impl_->stream));
}

CudnnConvEngine::~CudnnConvEngine() {
  impl_->plans.clear();
  if (impl_->workspace != nullptr) (void)cudaFreeAsync(impl_->workspace, impl_->stream);
  if (impl_->handle != nullptr) (void)cudnnDestroy(impl_->handle);
}

size_t CudnnConvEngine::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->plans.size();
}

std::string CudnnConvEngine::describe(const CudnnConvCall& call) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Plan& p = impl_->plan_for(call);
  return p.notes + ", workspace " + std::to_string(p.workspace) + " bytes";
}

void CudnnConvEngine::run(const CudnnConvCall& call) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Plan& p = impl_->plan_for(call);
  if (p.workspace > impl_->workspace_bytes) {
    if (impl_->workspace != nullptr) QSYNC_CUDA_CHECK(cudaFreeAsync(impl_->workspace, impl_->stream));
    impl_->workspace = nullptr;
    QSYNC_CUDA_CHECK(cudaMallocAsync(&impl_->workspace, size_t(p.workspace), impl_->stream));
    impl_->workspace_bytes = p.workspace;
  }
  const bool fwd = call.op == CudnnConvOp::FORWARD, data = call.op == CudnnConvOp::BACKWARD_DATA;
  void* x = fwd || !data ? const_cast<void*>(call.x) : call.out;
  void* w = fwd ? const_cast<void*>(call.w) : (data ? const_cast<void*>(call.w) : call.out);
  void* y = fwd ? call.out : const_cast<void*>(call.dy);
  void* pointers[3] = {x, w, y};
  const int64_t uids[3] = {UID_X, UID_W, UID_Y};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  void* ws = impl_->workspace;
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  pack.finalize();
  QSYNC_CUDNN_CHECK(cudnnBackendExecute(impl_->handle, p.plan.get(), pack.get()));
}

std::string cudnn_version_text() {
  return "cuDNN " + std::to_string(cudnnGetVersion()) + " (runtime), headers " + std::to_string(CUDNN_MAJOR) + "." +
         std::to_string(CUDNN_MINOR) + "." + std::to_string(CUDNN_PATCHLEVEL);
}

}  // namespace qsync
