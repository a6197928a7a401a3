// File: worker/layers/elementwise.cpp
// Unary, binary and where layers of ONNX graphs: forward next to backward (see elementwise.h).
#include "worker/layers/elementwise.h"

#include <cmath>
#include <stdexcept>

#include "worker/layers/broadcast.h"
#include "worker/layers/graph_host.h"
#include "worker/layers/parameter_init.h"
#include "worker/layers/shape_check.h"

namespace qsync {

namespace {

Tensor host_tensor(const GraphTensor& g) {
  Tensor t = Tensor::empty(g.dims, Precision::FP32, nullptr, g.name);
  std::copy(g.values->begin(), g.values->end(), t.f32());
  return t;
}

Shape full(int64_t batch, const Shape& per_sample) {
  Shape s = per_sample;
  s.insert(s.begin(), batch);
  return s;
}

// Sums g (full shape `out`) into a tensor of shape `to` (the operand's, broadcast).
Tensor reduce_to(const Tensor& g, const Shape& out, const Shape& to, float sign, StepContext& ctx, const std::string& what) {
  Tensor r = Tensor::zeros(to, Precision::FP32, ops_of(ctx).device().is_host() ? ctx.memory : nullptr, what);
  float* rp = r.f32();
  const float* gp = g.f32();
  for_each_broadcast(out, {to}, [&](int64_t o, const int64_t* off) { rp[off[0]] += sign * gp[o]; });
  return r;
}

ElementwiseOperand operand(const LayerDesc& d, size_t slot, size_t& next_activation, size_t& next_constant) {
  ElementwiseOperand op;
  op.kind = int(d.axes.at(slot));
  if (op.kind == 1) op.activation = int(next_activation++);
  if (op.kind == 0) op.constant = host_tensor(d.constants.at(next_constant++));
  return op;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Unary: sigmoid' = y (1 - y), tanh' = 1 - y^2, erf' = 2 / sqrt(pi) exp(-x^2)

UnaryLayer::UnaryLayer(const LayerDesc& d, MemoryAccount* memory) : Layer(d) {
  (void)memory;
  if (d.op == "Sigmoid") op_ = Op::SIGMOID;
  else if (d.op == "Tanh") op_ = Op::TANH;
  else if (d.op == "Erf") op_ = Op::ERF;
  else throw std::invalid_argument("layer '" + d.name + "': unknown unary op '" + d.op + "' (Sigmoid, Tanh, Erf)");
  desc_.out_shape = d.in_shape;
}

Tensor UnaryLayer::forward(const Tensor& x_in, StepContext& ctx) {
  check_batched(x_in, desc_.in_shape, name(), "input");
  const Tensor x = host_of(x_in);
  Tensor y = host_empty(x.shape(), ctx, name() + ".out");
  const float* xp = x.f32();
  float* yp = y.f32();
  for (int64_t i = 0; i < x.numel(); ++i) {
    switch (op_) {
      case Op::SIGMOID: yp[i] = 1.0f / (1.0f + std::exp(-xp[i])); break;
      case Op::TANH: yp[i] = std::tanh(xp[i]); break;
      case Op::ERF: yp[i] = std::erf(xp[i]); break;
    }
  }
  saved_ = Tensor();
  if (ctx.training) saved_ = op_ == Op::ERF ? x : y;
  return to_rank(y, ctx, name() + ".out");
}

Tensor UnaryLayer::backward(const Tensor& dy_in, StepContext& ctx) {
  check_batched(dy_in, desc_.out_shape, name(), "dy");
  if (!saved_.defined() || saved_.shape() != dy_in.shape())
    throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
  const Tensor dy = host_of(dy_in);
  Tensor dx = host_empty(dy.shape(), ctx, name() + ".dx");
  const float* s = saved_.f32();
  const float* g = dy.f32();
  float* d = dx.f32();
  constexpr float TWO_OVER_SQRT_PI = 1.12837916709551257390f;
  for (int64_t i = 0; i < dy.numel(); ++i) {
    switch (op_) {
      case Op::SIGMOID: d[i] = g[i] * s[i] * (1.0f - s[i]); break;
      case Op::TANH: d[i] = g[i] * (1.0f - s[i] * s[i]); break;
      case Op::ERF: d[i] = g[i] * TWO_OVER_SQRT_PI * std::exp(-s[i] * s[i]); break;
    }
  }
  saved_ = Tensor();
  return to_rank(dx, ctx, name() + ".dx");
}

// ---------------------------------------------------------------------------------------------
// Binary

BinaryLayer::BinaryLayer(const LayerDesc& d, MemoryAccount* memory) : MultiInputLayer(d) {
  if (d.op == "Add") op_ = Op::ADD;
  else if (d.op == "Sub") op_ = Op::SUB;
  else if (d.op == "Mul") op_ = Op::MUL;
  else if (d.op == "Div") op_ = Op::DIV;
  else throw std::invalid_argument("layer '" + d.name + "': unknown binary op '" + d.op + "' (Add, Sub, Mul, Div)");
  if (d.axes.size() != 2) throw std::invalid_argument("layer '" + d.name + "': a binary layer needs two operand kinds");
  size_t act = 0, cst = 0;
  a_ = operand(d, 0, act, cst);
  b_ = operand(d, 1, act, cst);
  if (act != d.graph_inputs.size())
    throw std::invalid_argument("layer '" + d.name + "': operand kinds do not match its graph inputs");
  if (a_.kind == 2 || b_.kind == 2) {
    const GraphTensor& g = d.initial.at(0);
    param_ = parameter_allocate(d.name + ".operand", g.dims, false, memory);
  }
}

void BinaryLayer::collect_parameters(std::vector<Parameter*>& out) {
  if (param_.value.defined()) out.push_back(&param_);
}

int64_t BinaryLayer::saved_bytes() const {
  return (saved_a_.defined() ? saved_a_.bytes() : 0) + (saved_b_.defined() ? saved_b_.bytes() : 0);
}

Tensor BinaryLayer::forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) {
  batch_ = xs.at(0).dim(0);
  for (size_t i = 0; i < xs.size(); ++i) check_batched(xs[i], desc_.input_shapes.at(i), name(), "input");
  auto value = [&](const ElementwiseOperand& o) -> Tensor {
    if (o.kind == 1) return host_of(xs[size_t(o.activation)]);
    if (o.kind == 0) return o.constant;
    return host_of(param_.value);
  };
  const Tensor a = value(a_), b = value(b_);
  a_shape_ = a.shape();
  b_shape_ = b.shape();
  const Shape out = full(batch_, desc_.out_shape);
  Tensor y = host_empty(out, ctx, name() + ".out");
  const float* ap = a.f32();
  const float* bp = b.f32();
  float* yp = y.f32();
  if (a_shape_ == out && b_shape_ == out) {  // no broadcast (residual adds): plain loops
    const int64_t n = y.numel();
    switch (op_) {
      case Op::ADD: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i]; break;
      case Op::SUB: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] - bp[i]; break;
      case Op::MUL: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] * bp[i]; break;
      case Op::DIV: for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] / bp[i]; break;
    }
  } else switch (op_) {
    case Op::ADD: for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) { yp[o] = ap[f[0]] + bp[f[1]]; }); break;
    case Op::SUB: for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) { yp[o] = ap[f[0]] - bp[f[1]]; }); break;
    case Op::MUL: for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) { yp[o] = ap[f[0]] * bp[f[1]]; }); break;
    case Op::DIV: for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) { yp[o] = ap[f[0]] / bp[f[1]]; }); break;
  }
  saved_a_ = saved_b_ = Tensor();
  if (ctx.training && (op_ == Op::MUL || op_ == Op::DIV)) {
    saved_a_ = a;  // the operands themselves (activations are never written after they are produced)
    saved_b_ = b;
  }
  return to_rank(y, ctx, name() + ".out");
}

std::vector<Tensor> BinaryLayer::backward_inputs(const Tensor& dy_in, StepContext& ctx) {
  check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  const Shape out = dy.shape();
  Tensor ga, gb;  // full operand shapes
  if (op_ == Op::ADD && a_shape_ == out && b_shape_ == out) {
    ga = gb = dy;  // the same gradient flows to both operands (never written in place)
  } else if (op_ == Op::ADD || op_ == Op::SUB) {
    ga = reduce_to(dy, out, a_shape_, 1.0f, ctx, name() + ".da");
    gb = reduce_to(dy, out, b_shape_, op_ == Op::SUB ? -1.0f : 1.0f, ctx, name() + ".db");
  } else {
    if (!saved_a_.defined()) throw std::logic_error("layer '" + name() + "': backward without a matching training forward");
    const bool host_rank = ops_of(ctx).device().is_host();
    ga = Tensor::zeros(a_shape_, Precision::FP32, host_rank ? ctx.memory : nullptr, name() + ".da");
    gb = Tensor::zeros(b_shape_, Precision::FP32, host_rank ? ctx.memory : nullptr, name() + ".db");
    const float* ap = saved_a_.f32();
    const float* bp = saved_b_.f32();
    const float* g = dy.f32();
    float* da = ga.f32();
    float* db = gb.f32();
    if (op_ == Op::MUL) {
      for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) {
        da[f[0]] += g[o] * bp[f[1]];
        db[f[1]] += g[o] * ap[f[0]];
      });
    } else {
      for_each_broadcast(out, {a_shape_, b_shape_}, [&](int64_t o, const int64_t* f) {
        const float inv = 1.0f / bp[f[1]];
        da[f[0]] += g[o] * inv;
        db[f[1]] -= g[o] * ap[f[0]] * inv * inv;
      });
    }
  }
  saved_a_ = saved_b_ = Tensor();
  std::vector<Tensor> dxs(desc_.graph_inputs.size());
  auto route = [&](const ElementwiseOperand& o, const Tensor& g) {
    if (o.kind == 1) dxs[size_t(o.activation)] = to_rank(g, ctx, name() + ".dx");
    if (o.kind == 2) accumulate_grad(param_, g, ctx);
  };
  route(a_, ga);
  route(b_, gb);
  return dxs;
}

// ---------------------------------------------------------------------------------------------
// Where

WhereLayer::WhereLayer(const LayerDesc& d, MemoryAccount* memory) : MultiInputLayer(d) {
  (void)memory;
  if (d.axes.size() != 2 || d.constants.empty())
    throw std::invalid_argument("layer '" + d.name + "': a where layer needs a constant condition and two operands");
  cond_ = host_tensor(d.constants[0]);
  size_t act = 0, cst = 1;
  x_ = operand(d, 0, act, cst);
  y_ = operand(d, 1, act, cst);
  if (act != d.graph_inputs.size() || act == 0)
    throw std::invalid_argument("layer '" + d.name + "': operand kinds do not match its graph inputs");
}

Tensor WhereLayer::forward_inputs(const std::vector<Tensor>& xs, StepContext& ctx) {
  batch_ = xs.at(0).dim(0);
  for (size_t i = 0; i < xs.size(); ++i) check_batched(xs[i], desc_.input_shapes.at(i), name(), "input");
  const Tensor x = x_.kind == 1 ? host_of(xs[size_t(x_.activation)]) : x_.constant;
  const Tensor y = y_.kind == 1 ? host_of(xs[size_t(y_.activation)]) : y_.constant;
  x_shape_ = x.shape();
  y_shape_ = y.shape();
  const Shape out = full(batch_, desc_.out_shape);
  Tensor r = host_empty(out, ctx, name() + ".out");
  const float* c = cond_.f32();
  const float* xp = x.f32();
  const float* yp = y.f32();
  float* rp = r.f32();
  for_each_broadcast(out, {cond_.shape(), x_shape_, y_shape_},
                     [&](int64_t o, const int64_t* f) { rp[o] = c[f[0]] != 0.0f ? xp[f[1]] : yp[f[2]]; });
  return to_rank(r, ctx, name() + ".out");
}

std::vector<Tensor> WhereLayer::backward_inputs(const Tensor& dy_in, StepContext& ctx) {
  check_batched(dy_in, desc_.out_shape, name(), "dy");
  const Tensor dy = host_of(dy_in);
  const Shape out = dy.shape();
  std::vector<Tensor> dxs(desc_.graph_inputs.size());
  const float* c = cond_.f32();
  const float* g = dy.f32();
  auto branch = [&](const ElementwiseOperand& o, const Shape& shape, bool when) {
    if (o.kind != 1) return;
    Tensor d = Tensor::zeros(shape, Precision::FP32, ops_of(ctx).device().is_host() ? ctx.memory : nullptr, name() + ".dx");
    float* dp = d.f32();
    for_each_broadcast(out, {cond_.shape(), shape}, [&](int64_t i, const int64_t* f) {
      if ((c[f[0]] != 0.0f) == when) dp[f[1]] += g[i];
    });
    dxs[size_t(o.activation)] = to_rank(d, ctx, name() + ".dx");
  };
  branch(x_, x_shape_, true);
  branch(y_, y_shape_, false);
  return dxs;
}

}  // namespace qsync
