// File: tests/worker/ops/cuda_ops_test.cpp
// The CUDA implementation of the op interface against the CPU one (the reference), op by op on
// the same inputs: bit for bit where worker/ops/cuda/ promises it (ReLU, the residual add,
// dropout, transposes, the broadcast and batch sums, pooling, embeddings, the quantizers and
// conversions, and the optimizer step: the weights of CPU and GPU ranks stay equal), within a
// commented tolerance elsewhere (GELU, layer norm, attention, convolution, matmul, the loss).
// Needs a GPU: every test skips without one (reported as skipped by ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "worker/layer.h"
#include "worker/ops/cpu_ops.h"
#include "worker/ops/cuda/cuda_ops.h"

namespace qsync {
namespace {

CudaOps* gpu() {
  // Never destroyed: CUDA calls from static destructors can run after the runtime shut down.
  static CudaOps* ops = cuda_device_count() > 0 ? new CudaOps(0) : nullptr;
  return ops;
}
#define REQUIRE_GPU() \
  if (gpu() == nullptr) GTEST_SKIP() << "no CUDA device"

Tensor host_normal(const Shape& s, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(s, Precision::FP32, nullptr);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng);
  return t;
}

Tensor to_gpu(const Tensor& h) {
  Tensor d = gpu()->empty(h.shape(), h.precision(), nullptr, "test");
  tensor_copy_from_host(h, d);
  return d;
}

Tensor back(const Tensor& d) {
  gpu()->synchronize();
  return tensor_to_host(d);
}

void expect_bitwise(const Tensor& cpu, const Tensor& cuda_host, const std::string& what) {
  ASSERT_EQ(cpu.bytes(), cuda_host.bytes()) << what;
  EXPECT_EQ(std::memcmp(cpu.data(), cuda_host.data(), size_t(cpu.bytes())), 0) << what << ": not bit-identical";
}

double relative(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    d += (x - y) * (x - y);
    n += y * y;
  }
  return std::sqrt(d / (n > 0 ? n : 1));
}

TEST(CudaOps, ElementwiseOpsAreBitIdentical) {
  REQUIRE_GPU();
  DeviceOps& cpu = cpu_ops();
  const Shape s{6, 37, 5};
  const Tensor x = host_normal(s, 1), y = host_normal(s, 2);
  const Tensor dx = to_gpu(x), dy = to_gpu(y);
  // ReLU with its mask, and back
  Tensor out = Tensor::empty(s, Precision::FP32, nullptr), mask = Tensor::empty(s, Precision::INT8, nullptr);
  Tensor dout = gpu()->empty(s, Precision::FP32, nullptr, "t"), dmask = gpu()->empty(s, Precision::INT8, nullptr, "t");
  cpu.relu_forward(x, out, &mask);
  gpu()->relu_forward(dx, dout, &dmask);
  expect_bitwise(out, back(dout), "relu forward");
  expect_bitwise(mask, back(dmask), "relu mask");
  cpu.relu_backward(y, mask, out);
  gpu()->relu_backward(dy, dmask, dout);
  expect_bitwise(out, back(dout), "relu backward");
  cpu.add(x, y, out);
  gpu()->add(dx, dy, dout);
  expect_bitwise(out, back(dout), "add");
  // Dropout: the same counter-based mask
  cpu.dropout_forward(x, 0.3, 12345, out, mask);
  gpu()->dropout_forward(dx, 0.3, 12345, dout, dmask);
  expect_bitwise(out, back(dout), "dropout forward");
  expect_bitwise(mask, back(dmask), "dropout mask");
  cpu.dropout_backward(y, mask, 0.3, out);
  gpu()->dropout_backward(dy, dmask, 0.3, dout);
  expect_bitwise(out, back(dout), "dropout backward");
  // Per-sample transpose (ToTokens)
  Tensor t = Tensor::empty({6, 5, 37}, Precision::FP32, nullptr);
  Tensor dt = gpu()->empty({6, 5, 37}, Precision::FP32, nullptr, "t");
  cpu.transpose_batched(x, t, 6, 37, 5);
  gpu()->transpose_batched(dx, dt, 6, 37, 5);
  expect_bitwise(t, back(dt), "transpose_batched");
  // Positional table: broadcast add and the batch sums (batch in order)
  const Tensor table = host_normal({37, 5}, 3);
  Tensor dtable = to_gpu(table);
  cpu.add_broadcast(x, table, out);
  gpu()->add_broadcast(dx, dtable, dout);
  expect_bitwise(out, back(dout), "add_broadcast");
  Tensor acc = table.clone(nullptr);
  cpu.sum_batch_into(y, acc);
  gpu()->sum_batch_into(dy, dtable);
  expect_bitwise(acc, back(dtable), "sum_batch_into");
  // Bias row sums in kernels/column_sum_order.h's order: one chunk (in place), three (partials)
  for (const int64_t rows : {int64_t{100}, int64_t{300}}) {
    const Tensor g = host_normal({rows, 33}, 4);
    Tensor db = host_normal({33}, 5);
    Tensor ddb = to_gpu(db);
    cpu.bias_grad_rows(g, db);
    gpu()->bias_grad_rows(to_gpu(g), ddb);
    expect_bitwise(db, back(ddb), "bias_grad_rows, " + std::to_string(rows) + " rows");
  }
}

// GELU: CUDA's erff / expf against the CPU's erfc polynomial and exp (each within a few 1e-7 of
// the exact values): 1e-6 relative over the tensor.
TEST(CudaOps, GeluWithinAFewUlp) {
  REQUIRE_GPU();
  const Shape s{4, 1000};
  const Tensor x = host_normal(s, 5, 3.0f), dy = host_normal(s, 6);
  Tensor out = Tensor::empty(s, Precision::FP32, nullptr), dout = gpu()->empty(s, Precision::FP32, nullptr, "t");
  Tensor d = out.clone(nullptr), dd = gpu()->empty(s, Precision::FP32, nullptr, "t");
  cpu_ops().gelu_forward(x, out, &d);
  gpu()->gelu_forward(to_gpu(x), dout, &dd);
  EXPECT_LE(relative(back(dout), out), 1e-6);
  EXPECT_LE(relative(back(dd), d), 1e-6);  // the saved derivative
  Tensor eval_out = gpu()->empty(s, Precision::FP32, nullptr, "t");
  gpu()->gelu_forward(to_gpu(x), eval_out, nullptr);  // no derivative outside training
  expect_bitwise(back(eval_out), back(dout), "gelu forward without the derivative");
  cpu_ops().gelu_backward(d, dy, out);
  gpu()->gelu_backward(dd, to_gpu(dy), dout);
  EXPECT_LE(relative(back(dout), out), 1e-6);
}

// Layer norm: warp sums in another order than the CPU's serial ones: 1e-5 relative.
TEST(CudaOps, LayerNormWithinRoundingOfTheSums) {
  REQUIRE_GPU();
  const int64_t rows = 300, C = 96;
  const Tensor x = host_normal({rows, C}, 7), w = host_normal({C}, 8), b = host_normal({C}, 9), dy = host_normal({rows, C}, 10);
  Tensor y = Tensor::empty({rows, C}, Precision::FP32, nullptr), xhat = y.clone(nullptr), rstd = Tensor::empty({rows}, Precision::FP32, nullptr);
  Tensor dyv = gpu()->empty({rows, C}, Precision::FP32, nullptr, "t"), dxhat = gpu()->empty({rows, C}, Precision::FP32, nullptr, "t");
  Tensor drstd = gpu()->empty({rows}, Precision::FP32, nullptr, "t");
  const Tensor dw_dev = to_gpu(w), db_dev = to_gpu(b);
  cpu_ops().layernorm_forward(x, w, b, 1e-5f, y, &xhat, &rstd);
  gpu()->layernorm_forward(to_gpu(x), dw_dev, db_dev, 1e-5f, dyv, &dxhat, &drstd);
  EXPECT_LE(relative(back(dyv), y), 1e-5);
  Tensor dx = y.clone(nullptr), gw = Tensor::zeros({C}, Precision::FP32, nullptr), gb = gw.clone(nullptr);
  Tensor ddx = gpu()->empty({rows, C}, Precision::FP32, nullptr, "t"), dgw = to_gpu(gw), dgb = to_gpu(gb);
  cpu_ops().layernorm_backward(dy, xhat, rstd, w, dx, gw, gb);
  gpu()->layernorm_backward(to_gpu(dy), dxhat, drstd, dw_dev, ddx, dgw, dgb);
  EXPECT_LE(relative(back(ddx), dx), 1e-5);
  EXPECT_LE(relative(back(dgw), gw), 1e-5);
  EXPECT_LE(relative(back(dgb), gb), 1e-5);
}

TEST(CudaOps, EmbeddingIsBitIdenticalAndReportsABadIdAtSynchronize) {
  REQUIRE_GPU();
  const int64_t B = 5, T = 16, C = 24, V = 11;
  Tensor x = Tensor::empty({B, T}, Precision::FP32, nullptr);
  std::mt19937 rng(11);
  for (int64_t i = 0; i < B * T; ++i) x.f32()[i] = float(rng() % V);  // repeats: rows collide
  const Tensor wte = host_normal({V, C}, 12), wpe = host_normal({T, C}, 13), dy = host_normal({B, T, C}, 14);
  Tensor ids = Tensor::empty({B, T}, Precision::FP32, nullptr), dids = gpu()->empty({B, T}, Precision::FP32, nullptr, "t");
  cpu_ops().embedding_ids(x, V, ids, "embed");
  gpu()->embedding_ids(to_gpu(x), V, dids, "embed");
  expect_bitwise(ids, back(dids), "ids");
  Tensor y = Tensor::empty({B, T, C}, Precision::FP32, nullptr), dyv = gpu()->empty({B, T, C}, Precision::FP32, nullptr, "t");
  cpu_ops().embedding_forward(ids, wte, wpe, y);
  gpu()->embedding_forward(dids, to_gpu(wte), to_gpu(wpe), dyv);
  expect_bitwise(y, back(dyv), "embedding forward");
  Tensor gte = wte.clone(nullptr), gpe = wpe.clone(nullptr);  // accumulate onto non-zero tables
  Tensor dgte = to_gpu(gte), dgpe = to_gpu(gpe);
  cpu_ops().embedding_backward(dy, ids, gte, gpe);
  gpu()->embedding_backward(to_gpu(dy), dids, dgte, dgpe);
  expect_bitwise(gte, back(dgte), "token table gradient");
  expect_bitwise(gpe, back(dgpe), "position table gradient");
  x.f32()[2 * T + 3] = 11.5f;
  gpu()->embedding_ids(to_gpu(x), V, dids, "embed");
  try {
    gpu()->synchronize();
    FAIL() << "a bad token id must be reported";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token id 11.5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(batch 2, position 3)"), std::string::npos) << e.what();
  }
}

TEST(CudaOps, PoolingIsBitIdentical) {
  REQUIRE_GPU();
  for (const PoolGeometry& g : {PoolGeometry{3, 9, 8, 2, 2, 0, 4, 4}, PoolGeometry{2, 7, 7, 3, 2, 1, 4, 4},
                                PoolGeometry{4, 6, 6, 3, 1, 1, 6, 6}}) {
    const int64_t B = 3;
    const Tensor x = host_normal({B, g.c, g.h, g.w}, 15), dy = host_normal({B, g.c, g.oh, g.ow}, 16);
    Tensor y = Tensor::empty({B, g.c, g.oh, g.ow}, Precision::FP32, nullptr), am = y.clone(nullptr);
    Tensor dyv = gpu()->empty(y.shape(), Precision::FP32, nullptr, "t"), dam = gpu()->empty(y.shape(), Precision::FP32, nullptr, "t");
    cpu_ops().maxpool_forward(x, g, y, &am);
    gpu()->maxpool_forward(to_gpu(x), g, dyv, &dam);
    expect_bitwise(y, back(dyv), "maxpool forward");
    expect_bitwise(am, back(dam), "maxpool argmax");
    Tensor dx = Tensor::empty(x.shape(), Precision::FP32, nullptr), ddx = gpu()->empty(x.shape(), Precision::FP32, nullptr, "t");
    cpu_ops().maxpool_backward(dy, am, g, dx);
    gpu()->maxpool_backward(to_gpu(dy), dam, g, ddx);
    expect_bitwise(dx, back(ddx), "maxpool backward (overlapping windows add in output order)");
  }
  for (bool tokens : {false, true}) {
    const int64_t B = 4, C = 6, N = 50;
    const Tensor x = host_normal(tokens ? Shape{B, N, C} : Shape{B, C, N}, 17), dy = host_normal({B, C}, 18);
    Tensor y = Tensor::empty({B, C}, Precision::FP32, nullptr), dyv = gpu()->empty({B, C}, Precision::FP32, nullptr, "t");
    cpu_ops().avgpool_forward(x, C, N, tokens, y);
    gpu()->avgpool_forward(to_gpu(x), C, N, tokens, dyv);
    expect_bitwise(y, back(dyv), "avgpool forward");
    Tensor dx = Tensor::empty(x.shape(), Precision::FP32, nullptr), ddx = gpu()->empty(x.shape(), Precision::FP32, nullptr, "t");
    cpu_ops().avgpool_backward(dy, C, N, tokens, dx);
    gpu()->avgpool_backward(to_gpu(dy), C, N, tokens, ddx);
    expect_bitwise(dx, back(ddx), "avgpool backward");
  }
}

TEST(CudaOps, CastsAreBitIdentical) {
  REQUIRE_GPU();
  const Tensor x = host_normal({33, 70}, 19, 5.0f);
  const Tensor dx = to_gpu(x);
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    Tensor c = Tensor::empty(x.shape(), p, nullptr), dc = gpu()->empty(x.shape(), p, nullptr, "t");
    cpu_ops().convert(x, c);
    gpu()->convert(dx, dc);
    expect_bitwise(c, back(dc), std::string("convert to ") + precision_name(p));
    Tensor r = x.clone(nullptr), dr = to_gpu(x);
    cpu_ops().round_to_sixteen_bit(r, p);
    gpu()->round_to_sixteen_bit(dr, p);
    expect_bitwise(r, back(dr), std::string("round to ") + precision_name(p));
  }
  for (bool per_row : {false, true})
    for (Rounding rounding : {Rounding::NEAREST_EVEN, Rounding::STOCHASTIC}) {
      Int8Quantization spec{per_row, 127, rounding, 77};
      Tensor q = Tensor::empty(x.shape(), Precision::INT8, nullptr), dq = gpu()->empty(x.shape(), Precision::INT8, nullptr, "t");
      cpu_ops().quantize_int8(x, spec, q, nullptr);
      gpu()->quantize_int8(dx, spec, dq, nullptr);
      expect_bitwise(q, back(dq), "int8 values");
      expect_bitwise(*q.scales, back(*dq.scales), "int8 scales");
      for (Precision out : {Precision::FP32, Precision::BF16, Precision::FP16}) {
        Tensor d = Tensor::empty(x.shape(), out, nullptr), dd = gpu()->empty(x.shape(), out, nullptr, "t");
        cpu_ops().dequantize_int8(q, d, Precision::BF16);
        gpu()->dequantize_int8(dq, dd, Precision::BF16);
        expect_bitwise(d, back(dd), std::string("dequantize to ") + precision_name(out));
      }
    }
  for (Precision p : {Precision::FP8_E4M3, Precision::FP8_E5M2}) {
    Tensor q = Tensor::empty(x.shape(), p, nullptr), qt = Tensor::empty({70, 33}, p, nullptr);
    Tensor dq = gpu()->empty(x.shape(), p, nullptr, "t"), dqt = gpu()->empty({70, 33}, p, nullptr, "t");
    cpu_ops().quantize_fp8(x, q, &qt);
    gpu()->quantize_fp8(dx, dq, &dqt);
    expect_bitwise(q, back(dq), std::string(precision_name(p)) + " values");
    expect_bitwise(qt, back(dqt), std::string(precision_name(p)) + " transposed");
    expect_bitwise(*q.scales, back(*dq.scales), std::string(precision_name(p)) + " scale");
  }
}

// Softmax + cross-entropy: double sums in another order: loss 1e-9 relative, gradient 1e-6.
TEST(CudaOps, FusedLossMatchesTheCpu) {
  REQUIRE_GPU();
  for (int64_t V : {int64_t(10), int64_t(96), int64_t(3000)}) {
    const int64_t P = 70;
    const Tensor logits = host_normal({P, V}, 20, 3.0f);
    Tensor targets = Tensor::empty({P}, Precision::FP32, nullptr);
    for (int64_t i = 0; i < P; ++i) targets.as<int32_t>()[i] = int32_t((i * 7) % V);
    Tensor g = logits.clone(nullptr), dg = gpu()->empty(logits.shape(), Precision::FP32, nullptr, "t");
    XentSums a, b;
    cpu_ops().softmax_xent(logits, targets, 140.0f, 8.0f, g, &a);
    gpu()->softmax_xent(to_gpu(logits), to_gpu(targets), 140.0f, 8.0f, dg, &b);
    EXPECT_LE(relative(back(dg), g), 1e-6) << V;
    EXPECT_NEAR(b.loss_sum, a.loss_sum, std::fabs(a.loss_sum) * 1e-9) << V;
    EXPECT_EQ(b.correct, a.correct) << V;
  }
}

// The optimizer's claim: equal weights, state and gradients give equal bits on both devices,
// clipping (the canonical norm) and loss scaling included.
TEST(CudaOps, OptimizerStepIsBitIdentical) {
  REQUIRE_GPU();
  for (bool adamw : {true, false}) {
    std::vector<Tensor> w, g, m, v, dw, dg, dm, dv;
    for (int64_t n : {int64_t(5), int64_t(3000), int64_t(2048 * 3 + 1)}) {
      w.push_back(host_normal({n}, uint32_t(n)));
      g.push_back(host_normal({n}, uint32_t(n + 1), 1024.0f));
      m.push_back(host_normal({n}, uint32_t(n + 2), 0.1f));
      Tensor vv = host_normal({n}, uint32_t(n + 3), 0.1f);
      for (int64_t i = 0; i < n; ++i) vv.f32()[i] = std::fabs(vv.f32()[i]);
      v.push_back(vv);
    }
    for (size_t i = 0; i < w.size(); ++i) {
      dw.push_back(to_gpu(w[i]));
      dg.push_back(to_gpu(g[i]));
      dm.push_back(to_gpu(m[i]));
      dv.push_back(to_gpu(v[i]));
    }
    std::vector<OptimizerSlot> cs, gs;
    for (size_t i = 0; i < w.size(); ++i) {
      cs.push_back({&w[i], &g[i], &m[i], adamw ? &v[i] : nullptr, i != 1});
      gs.push_back({&dw[i], &dg[i], &dm[i], adamw ? &dv[i] : nullptr, i != 1});
    }
    OptimizerUpdate u;
    u.adamw = adamw;
    u.lr = 1e-3f;
    u.weight_decay = 0.1f;
    u.bias_correction1 = 0.1f;
    u.bias_correction2 = 0.001f;
    u.grad_clip = 1.0;
    u.inv_loss_scale = 1.0f / 1024;
    u.skip_nonfinite = true;
    OptimizerStepResult a, b;
    cpu_ops().optimizer_step(cs, u, &a);
    gpu()->optimizer_step(gs, u, &b);
    gpu()->synchronize();
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "the canonical norm differs";
    EXPECT_EQ(a.skipped, b.skipped);
    for (size_t i = 0; i < w.size(); ++i) {
      expect_bitwise(w[i], back(dw[i]), "weights " + std::to_string(i));
      expect_bitwise(m[i], back(dm[i]), "first moment " + std::to_string(i));
      if (adamw) expect_bitwise(v[i], back(dv[i]), "second moment " + std::to_string(i));
    }
  }
}

// FP32 products in another order (cuBLASLt, cuDNN) than oneDNN's: 1e-5 relative.
TEST(CudaOps, MatmulAttentionAndConvolutionWithinFp32Rounding) {
  REQUIRE_GPU();
  StepContext ctx;
  StepContext dctx;
  dctx.ops = gpu();
  {
    const Tensor a = host_normal({40, 33}, 21), b = host_normal({27, 33}, 22), bias = host_normal({27}, 23);
    Tensor c = Tensor::empty({40, 27}, Precision::FP32, nullptr), dc = gpu()->empty({40, 27}, Precision::FP32, nullptr, "t");
    MatmulOptions o;
    o.bias = &bias;
    cpu_ops().matmul(a, Transpose::NO, b, Transpose::YES, c, o);
    const Tensor dbias = to_gpu(bias);
    MatmulOptions od;
    od.bias = &dbias;
    gpu()->matmul(to_gpu(a), Transpose::NO, to_gpu(b), Transpose::YES, dc, od);
    EXPECT_LE(relative(back(dc), c), 1e-5) << "matmul";
  }
  for (bool causal : {true, false}) {
    const AttentionShape s{3, 17, 32, 4, causal};
    const Tensor qkv = host_normal({3, 17, 96}, 24), dout = host_normal({3, 17, 32}, 25);
    Tensor att = Tensor::empty({3, 4, 17, 17}, Precision::FP32, nullptr), out = Tensor::empty({3, 17, 32}, Precision::FP32, nullptr);
    Tensor datt = gpu()->empty(att.shape(), Precision::FP32, nullptr, "t"), dout_dev = gpu()->empty(out.shape(), Precision::FP32, nullptr, "t");
    const Tensor dqkv_in = to_gpu(qkv);
    cpu_ops().attention_forward(qkv, s, false, att, out, ctx, "att");
    gpu()->attention_forward(dqkv_in, s, false, datt, dout_dev, dctx, "att");
    EXPECT_LE(relative(back(dout_dev), out), 1e-5) << "attention forward";
    Tensor dq = Tensor::empty({3, 17, 96}, Precision::FP32, nullptr), ddq = gpu()->empty(dq.shape(), Precision::FP32, nullptr, "t");
    cpu_ops().attention_backward(qkv, att, dout, s, false, dq, ctx, "att");
    gpu()->attention_backward(dqkv_in, datt, to_gpu(dout), s, false, ddq, dctx, "att");
    EXPECT_LE(relative(back(ddq), dq), 1e-5) << "attention backward";
  }
  {
    const ConvGeometry g{3, 11, 9, 3, 2, 1, 6, 5};
    const int64_t B = 4, O = 7, ckk = 27;
    const Tensor x = host_normal({B, 3, 11, 9}, 26), w = host_normal({O, ckk}, 27), bias = host_normal({O}, 28);
    const Tensor dy = host_normal({B, O, 6, 5}, 29);
    Tensor y = Tensor::empty({B, O, 6, 5}, Precision::FP32, nullptr), dyv = gpu()->empty(y.shape(), Precision::FP32, nullptr, "t");
    const Tensor dbias = to_gpu(bias), dw_dev = to_gpu(w), dx_dev = to_gpu(x);
    cpu_ops().conv2d_forward(x, w, &bias, g, {}, y, ctx, "conv");
    gpu()->conv2d_forward(dx_dev, dw_dev, &dbias, g, {}, dyv, dctx, "conv");
    EXPECT_LE(relative(back(dyv), y), 1e-5) << "conv forward";
    Tensor dx = Tensor::empty(x.shape(), Precision::FP32, nullptr), gw = Tensor::zeros(w.shape(), Precision::FP32, nullptr);
    Tensor gb = Tensor::zeros({O}, Precision::FP32, nullptr);
    Tensor ddx = gpu()->empty(x.shape(), Precision::FP32, nullptr, "t"), dgw = to_gpu(gw), dgb = to_gpu(gb);
    const Tensor ddy = to_gpu(dy);
    Conv2dBackward a{&dy, &x, &w, [](const Tensor& t, const Tensor*, float) { return t; }, &dx, &gw, &gb};
    Conv2dBackward da{&ddy, &dx_dev, &dw_dev, [](const Tensor& t, const Tensor*, float) { return t; }, &ddx, &dgw, &dgb};
    cpu_ops().conv2d_backward(a, g, ctx, "conv");
    gpu()->conv2d_backward(da, g, dctx, "conv");
    EXPECT_LE(relative(back(ddx), dx), 1e-5) << "conv input gradient";
    EXPECT_LE(relative(back(dgw), gw), 1e-5) << "conv weight gradient";
    expect_bitwise(gb, back(dgb), "conv bias gradient (the CPU's order)");
  }
}

}  // namespace
}  // namespace qsync
