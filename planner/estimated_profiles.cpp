// File: planner/estimated_profiles.cpp
// ESTIMATED device profiles of GPU classes this project cannot measure, and an estimated
// all-reduce. Nothing here was measured: the figures are the vendors' public datasheet peaks,
// and each op is priced by a roofline:
//
//   seconds = LAUNCH + max(flops / (peak(precision) * COMPUTE_EFFICIENCY),
//                          bytes / (bandwidth * BANDWIDTH_EFFICIENCY))
//
// with COMPUTE_EFFICIENCY = 0.5 (GEMMs of the small layers these models have rarely reach more
// than half of the datasheet peak), BANDWIDTH_EFFICIENCY = 0.8 and LAUNCH = 5 us per kernel.
// Casts (and other non-GEMM layers, and the optimizer) are bandwidth-bound streams.
//
// Peaks are DENSE figures (datasheets often print 2:4-sparse ones, marked *; those are halved
// here), in TFLOPS (TOPS for INT8). Sources: the NVIDIA datasheets of each product:
//   T4        FP32 8.1, FP16 tensor 65, INT8 130; no BF16, no TF32, no FP8; 320 GB/s, 16 GB
//   A10       FP32 31.2, TF32 62.5, BF16/FP16 125, INT8 250; 600 GB/s, 24 GB
//   L4        FP32 30.3, TF32 60 (120*), BF16/FP16 121 (242*), FP8 242 (485*), INT8 242 (485*);
//             300 GB/s, 24 GB
//   V100 SXM2 FP32 15.7, FP16 tensor 125; no BF16 and no INT8 tensor cores: INT8 through dp4a,
//             about 4x FP32 = 62.8 TOPS (an estimate of ours); 900 GB/s, 32 GB
//   A100 SXM4 80GB  FP32 19.5, TF32 156, BF16/FP16 312, INT8 624; 2039 GB/s, 80 GB
//   H100 SXM5 FP32 67, TF32 495 (989*), BF16/FP16 990 (1979*), FP8 1979 (3958*),
//             INT8 1979 (3958*); 3350 GB/s, 80 GB
//   H200 SXM  the H100 SXM5's compute; 4800 GB/s, 141 GB
// Memory sizes are taken as GiB (memory_bytes = size * 2^30); the allocator should keep headroom.
// The layer precision fp32 runs at the FP32 (not TF32) peak, as the worker computes it.
// Checked once against a real H200 (PyTorch 2.11 cuBLAS/cuDNN, summed GPU kernel time of one
// layer's forward+backward at batch 128, host overhead excluded): the MLP's linear layers came
// within 0.9-1.1x of these estimates in bf16 and 1.4-2.6x slower in fp32; the CNN's small
// convolutions 1.3-5x slower (cuDNN reaches far less than half the peak with 1-64 channels), so
// bf16's gain on them is overstated here. Treat these profiles as optimistic, and measure.
// Precisions without a unit are unsupported and left out of the profile (T4 and V100: bf16;
// all but L4/H100/H200: fp8); which layer precisions a class runs is the one rule of
// planner/layer_precision.h (layer_precision_support), read with the class's compute capability
// from kernels/device_class.h, so the planner never plans what the worker refuses. int8 backward
// runs in the 16-bit format: BF16 where the GPU has it, else FP16. tf32 is the FP32 layer on
// TF32 tensor cores (sm80+): no casts, FP32 storage. The V100 (sm70) keeps its figures, but
// CUDA 13 cannot compile for it: estimating it is refused with that message (plan time).
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "planner/device_profile.h"

namespace qsync {
namespace {

constexpr double COMPUTE_EFFICIENCY = 0.5;
constexpr double BANDWIDTH_EFFICIENCY = 0.8;
constexpr double LAUNCH = 5e-6;  // seconds per kernel

struct GpuFigures {
  const char* name;     // device class name
  const char* product;  // what the figures are of
  double fp32, tf32, fp16, bf16, int8, fp8;  // dense peak TFLOPS / TOPS; 0: no such unit
  bool int8_tensor;     // false: INT8 through dp4a on the CUDA cores
  double bandwidth_gbs;
  double memory_gib;
};

const GpuFigures GPUS[] = {
    {"gpu-t4", "NVIDIA T4", 8.1, 0, 65, 0, 130, 0, true, 320, 16},
    {"gpu-a10", "NVIDIA A10", 31.2, 62.5, 125, 125, 250, 0, true, 600, 24},
    {"gpu-l4", "NVIDIA L4", 30.3, 60, 121, 121, 242, 242, true, 300, 24},
    {"gpu-v100", "NVIDIA V100 SXM2 32GB", 15.7, 0, 125, 0, 62.8, 0, false, 900, 32},
    {"gpu-a100", "NVIDIA A100 SXM4 80GB", 19.5, 156, 312, 312, 624, 0, true, 2039, 80},
    {"gpu-h100", "NVIDIA H100 SXM5", 67, 495, 990, 990, 1979, 1979, true, 3350, 80},
    {"gpu-h200", "NVIDIA H200 SXM", 67, 495, 990, 990, 1979, 1979, true, 4800, 141},
};

const GpuFigures* gpu_by_name(const std::string& name) {
  for (const GpuFigures& g : GPUS)
    if (name == g.name || "gpu-" + name == g.name) return &g;
  return nullptr;
}

// FLOP/s of a GEMM whose operands are in `p`; 0: no unit.
double peak_flops(const GpuFigures& g, Precision p) {
  switch (p) {
    case Precision::FP32: return g.fp32 * 1e12;
    case Precision::TF32: return g.tf32 * 1e12;
    case Precision::BF16: return g.bf16 * 1e12;
    case Precision::FP16: return g.fp16 * 1e12;
    case Precision::INT8: return g.int8 * 1e12;
    case Precision::FP8_E4M3:
    case Precision::FP8_E5M2: return g.fp8 * 1e12;
  }
  return 0;
}

bool supports(const GpuFigures& g, LayerPrecision lp) {
  const LayerPrecisionTraits& t = layer_precision_traits(lp);
  return peak_flops(g, t.forward) > 0 && layer_precision_support(device_class_by_name(g.name), lp).ok;
}

// Layer precisions with casts around their GEMMs (fp32 and tf32 have none: FP32 tensors).
bool casts(LayerPrecision lp) { return layer_precision_traits(lp).weight_copy; }

Precision sixteen_bit_of(const GpuFigures& g) { return g.bf16 > 0 ? Precision::BF16 : Precision::FP16; }

struct Roofline {
  const GpuFigures& g;
  double bandwidth() const { return g.bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY; }
  double gemm(double flops, double bytes, Precision p) const {
    return LAUNCH + std::max(flops / (peak_flops(g, p) * COMPUTE_EFFICIENCY), bytes / bandwidth());
  }
  double stream(double bytes, int kernels = 1) const { return bytes <= 0 ? 0 : kernels * LAUNCH + bytes / bandwidth(); }
  // A cast of `numel` elements: scaled formats read the input twice (amax, then convert).
  LinearCost cast(Precision from, Precision to) const {
    const bool scaled = to == Precision::INT8 || to == Precision::FP8_E4M3 || to == Precision::FP8_E5M2;
    const double bytes = double(precision_bytes(from)) * (scaled ? 2 : 1) + precision_bytes(to);
    return LinearCost{bytes / bandwidth(), (scaled ? 2 : 1) * LAUNCH};
  }
};

// The storage of the output-gradient operand of the backward GEMMs.
Precision backward_precision(const GpuFigures& g, LayerPrecision lp) {
  const LayerPrecisionTraits& t = layer_precision_traits(lp);
  switch (t.backward) {
    case BackwardKind::SAME_AS_FORWARD: return t.forward;
    case BackwardKind::SIXTEEN_BIT: return sixteen_bit_of(g);
    case BackwardKind::INT8: return Precision::INT8;
    case BackwardKind::FP8_E5M2: return Precision::FP8_E5M2;
  }
  return Precision::FP32;
}

// A GEMM layer's costs. Convolutions are implicit GEMMs on a GPU: their traffic is the input and
// output tensors, not the (k*k larger) im2col columns; casts convert the input tensor itself.
LayerCost gemm_layer_cost(const Roofline& r, const LayerDesc& l, LayerPrecision lp, int64_t batch) {
  const LayerPrecisionTraits& t = layer_precision_traits(lp);
  const double m = double(batch * l.gemm_rows), n = double(l.gemm_n), k = double(l.gemm_k);
  const double flops = 2 * m * n * k;
  const double x = double(batch * shape_numel(l.in_shape)), y = double(batch * shape_numel(l.out_shape)), w = n * k;
  const Precision f = t.forward, g = backward_precision(r.g, lp);
  const double bf = precision_bytes(f), bg = precision_bytes(g);
  LayerCost c;
  // forward: cast x and w (FP32 -> f; w per output channel for int8), then the GEMM, FP32 out
  if (casts(lp)) c.forward_seconds += r.cast(Precision::FP32, f).at(int64_t(x)) + r.cast(Precision::FP32, f).at(int64_t(w));
  c.forward_seconds += r.gemm(flops, x * bf + w * bf + y * 4, f);
  // backward: cast dy, bring the saved x and w to the backward format, two GEMMs
  double bx = bf, bw = bf;
  if (casts(lp)) c.backward_seconds += r.cast(Precision::FP32, g).at(int64_t(y));
  if (t.backward == BackwardKind::SIXTEEN_BIT) {
    c.backward_seconds += r.cast(Precision::INT8, g).at(int64_t(x)) + r.cast(Precision::INT8, g).at(int64_t(w));
    bx = bw = bg;
  } else if (t.backward == BackwardKind::INT8) {
    c.backward_seconds += r.cast(Precision::FP32, Precision::INT8).at(int64_t(w));  // per-tensor weight
  }
  c.backward_seconds += r.gemm(flops, y * bg + w * bw + x * 4, g);      // dX = dY W
  c.backward_seconds += r.gemm(flops, y * bg + x * bx + w * 4 * 2, g);  // dW += dY^T X
  c.saved_bytes = batch * shape_numel(l.in_shape) * precision_bytes(t.saved_activation);
  c.weight_bytes = !t.weight_copy ? 0 : l.gemm_n * l.gemm_k * precision_bytes(t.saved_weight);
  return c;
}

// Non-GEMM leaves at FP32: streams of their inputs, outputs and saved tensors (what the worker's
// layers save: ReLU/dropout a 1-byte mask, GELU its derivative, max pooling int32 argmax, layer norm
// x-hat and 1/std per row, embedding the int32 ids, attention qkv and the probabilities).
LayerCost other_layer_cost(const Roofline& r, const LayerDesc& l, int64_t batch) {
  const double in = double(batch * shape_numel(l.in_shape)), out = double(batch * shape_numel(l.out_shape));
  LayerCost c;
  switch (l.kind) {
    case LayerKind::FLATTEN: return c;  // a view
    case LayerKind::RELU:
    case LayerKind::DROPOUT: c.saved_bytes = int64_t(in); break;
    case LayerKind::GELU: c.saved_bytes = int64_t(in) * 4; break;
    case LayerKind::MAXPOOL2D: c.saved_bytes = int64_t(out) * 4; break;
    case LayerKind::LAYERNORM: c.saved_bytes = int64_t(in) * 4 + int64_t(in / double(l.in_shape.back())) * 4; break;
    case LayerKind::EMBEDDING: c.saved_bytes = int64_t(in) * 4; break;
    case LayerKind::ATTENTION: {
      const double T = double(l.in_shape.at(0)), C = double(l.in_shape.at(1)), H = double(l.heads);
      const double causal = l.causal ? 0.5 : 1.0;
      const double qkv = batch * T * 3 * C * 4, att = batch * H * T * T * 4;
      c.saved_bytes = int64_t(qkv + att);
      c.forward_seconds = r.gemm(causal * 4 * batch * T * T * C, qkv + att + batch * T * C * 4, Precision::FP32);
      c.backward_seconds = r.gemm(causal * 8 * batch * T * T * C, 2 * (qkv + att + batch * T * C * 4), Precision::FP32);
      return c;
    }
    default: break;
  }
  c.forward_seconds = r.stream((in + out) * 4 + double(c.saved_bytes));
  c.backward_seconds = r.stream((in + out) * 4 + double(c.saved_bytes));
  return c;
}

std::string figures_text(const GpuFigures& g) {
  auto num = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return std::string(b);
  };
  std::string s = g.product + std::string(" datasheet dense peaks: FP32 ") + num(g.fp32);
  if (g.tf32 > 0) s += ", TF32 " + num(g.tf32);
  s += ", FP16 " + num(g.fp16);
  s += g.bf16 > 0 ? ", BF16 " + num(g.bf16) : ", no BF16";
  s += ", INT8 " + num(g.int8) + (g.int8_tensor ? "" : " (dp4a, ~4x FP32)");
  s += g.fp8 > 0 ? ", FP8 " + num(g.fp8) : ", no FP8";
  s += " TFLOPS/TOPS; " + num(g.bandwidth_gbs) + " GB/s; " + num(g.memory_gib) + " GB";
  return s;
}

}  // namespace

double gpu_datasheet_peak_tflops(const std::string& gpu_class, Precision p) {
  const GpuFigures* g = gpu_by_name(gpu_class);
  return g == nullptr ? 0.0 : peak_flops(*g, p) / 1e12;
}

std::vector<std::string> estimated_gpu_classes() {
  std::vector<std::string> out;
  for (const GpuFigures& g : GPUS) out.emplace_back(g.name);
  return out;
}

bool is_estimated_gpu_class(const std::string& device_class) { return gpu_by_name(device_class) != nullptr; }

DeviceProfile device_profile_estimate(const ModelDesc& model, const std::string& gpu_class, int64_t batch) {
  const GpuFigures* g = gpu_by_name(gpu_class);
  if (g == nullptr) {
    std::string known;
    for (const GpuFigures& x : GPUS) known += (known.empty() ? "" : ", ") + std::string(x.name);
    throw std::invalid_argument("no estimate for device class '" + gpu_class + "': estimated GPU classes are " + known +
                                " (CPU classes are measured with `qsync-worker profile`)");
  }
  if (batch <= 0) throw std::invalid_argument("device_profile_estimate: batch must be positive, got " + std::to_string(batch));
  const DeviceClass& cls = device_class_by_name(g->name);
  if (cls.cuda_sm < CUDA_MIN_SM)
    throw std::invalid_argument(layer_precision_support(cls, LayerPrecision::FP32).why);
  const Roofline r{*g};
  DeviceProfile p;
  p.model = model.name;
  p.model_hash = model.hash;
  p.device_class = g->name;
  p.batch = batch;
  p.estimated = true;
  p.source = "ESTIMATE from " + figures_text(*g) + "; roofline at 50% of peak compute, 80% of peak bandwidth, 5 us per kernel";
  for (const LayerDesc* l : model_gemm_layers(model))
    for (const LayerPrecisionTraits& t : layer_precision_table())
      if (supports(*g, t.mode)) p.gemm_layers[l->name][t.mode] = gemm_layer_cost(r, *l, t.mode, batch);
  for (const LayerDesc* l : model_leaf_layers(model))
    if (l->kind != LayerKind::LINEAR && l->kind != LayerKind::CONV2D) p.other_layers[l->name] = other_layer_cost(r, *l, batch);
  const Precision sixteen = sixteen_bit_of(*g);
  for (Precision to : {Precision::BF16, Precision::FP16, Precision::INT8, Precision::FP8_E4M3})
    if (peak_flops(*g, to) > 0) p.casts[{Precision::FP32, to}] = r.cast(Precision::FP32, to);
  if (g->int8 > 0) {
    p.casts[{Precision::INT8, sixteen}] = r.cast(Precision::INT8, sixteen);
    p.channel_casts[{Precision::FP32, Precision::INT8}] = r.cast(Precision::FP32, Precision::INT8);
  }
  p.casts[{Precision::FP32, Precision::FP32}] = r.cast(Precision::FP32, Precision::FP32);  // gradient bucket copies
  // AdamW (the worker's default): read p, g, m, v, write p, m, v, then zero g: 32 bytes a parameter.
  const int64_t params = model_parameter_count(model);
  p.optimizer_seconds = r.stream(double(params) * 32, 2);
  p.static_bytes = params * 4 * (2 + 2);
  p.memory_bytes = int64_t(g->memory_gib * double(int64_t(1) << 30));
  return p;
}

// Ring all-reduce estimate: 2(N-1) steps of ALPHA_PER_STEP each, and 2(N-1)/N of the message
// crossing each link at NETWORK_BYTES_PER_SECOND (10 Gbit/s Ethernet at 1.25 GB/s). An estimate:
// measure with `qsync-bench-allreduce --comm-profile comm.json` for real figures.
CommProfile comm_profile_estimate(int world_size) {
  constexpr double ALPHA_PER_STEP = 25e-6, NETWORK_BYTES_PER_SECOND = 1.25e9;
  if (world_size < 1) throw std::invalid_argument("comm_profile_estimate: world size must be at least 1, got " + std::to_string(world_size));
  CommProfile c;
  c.world_size = world_size;
  c.estimated = true;
  const double n = world_size;
  c.alpha = world_size > 1 ? 2 * (n - 1) * ALPHA_PER_STEP : 0;
  c.beta = world_size > 1 ? 2 * (n - 1) / n / NETWORK_BYTES_PER_SECOND : 0;
  c.source = "ESTIMATE: ring all-reduce, 25 us per step, 10 Gbit/s links";
  return c;
}

CommProfile comm_profile_rescaled(const CommProfile& measured, int world_size) {
  if (measured.world_size < 2 || world_size < 1)
    throw std::invalid_argument("comm_profile_rescaled: needs a measured world of at least 2 ranks (got " +
                                std::to_string(measured.world_size) + ") and a target of at least 1 (got " +
                                std::to_string(world_size) + ")");
  CommProfile c = measured;
  c.world_size = world_size;
  const double m = measured.world_size, n = world_size;
  c.alpha = measured.alpha * (n - 1) / (m - 1);
  c.beta = measured.beta * ((n - 1) / n) / ((m - 1) / m);
  c.late_sync_seconds = measured.late_sync_seconds * (n - 1) / (m - 1);  // latency-bound, as alpha
  c.late_alpha = measured.late_alpha * (n - 1) / (m - 1);
  c.late_beta = measured.late_beta * ((n - 1) / n) / ((m - 1) / m);
  c.estimated = true;
  c.source = measured.source + " (rescaled from " + std::to_string(measured.world_size) + " to " +
             std::to_string(world_size) + " ranks by the ring's step and traffic factors)";
  return c;
}

}  // namespace qsync
