// File: planner/model_shapes.cpp
// Shape inference for model layers (per sample, batch excluded): output shapes, parameter counts,
// GEMM dims, and the attention and transformer_block expansions. See planner/model_desc.h.
#include <utility>

#include "planner/model_layers.h"

namespace qsync::model_layers {
namespace {

[[noreturn]] void shape_error(const std::string& msg) { throw ShapeError(msg); }

int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) shape_error("sizes overflow 64 bits; use smaller dimensions");
  return r;
}
int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n = mul(n, d);
  return n;
}

void need_rank(const Shape& in, size_t rank, const char* what, const char* fix) {
  if (in.size() != rank) shape_error(std::string(what) + ", got " + shape_string(in) + "; " + fix);
}

// The output size of a window of `kernel` sliding by `stride` over `size` padded by `padding`.
int64_t window_out(int64_t size, int64_t kernel, int64_t stride, int64_t padding, const char* dim) {
  if (size + 2 * padding < kernel)
    shape_error("kernel " + std::to_string(kernel) + " is larger than the padded input " + dim + " " +
                std::to_string(size + 2 * padding) + "; use a smaller kernel or more padding");
  return (size + 2 * padding - kernel) / stride + 1;
}

LayerDesc leaf(std::string name, LayerKind kind) {
  LayerDesc l;
  l.name = std::move(name);
  l.kind = kind;
  return l;
}
LayerDesc linear(std::string name, int64_t out) {
  LayerDesc l = leaf(std::move(name), LayerKind::LINEAR);
  l.out = out;
  return l;
}

LayerDesc container(std::string name, LayerKind kind, std::vector<LayerDesc> children) {
  LayerDesc l = leaf(std::move(name), kind);
  l.children = std::move(children);
  return l;
}
LayerDesc dropout_layer(std::string name, double p) {
  LayerDesc l = leaf(std::move(name), LayerKind::DROPOUT);
  l.p = p;
  return l;
}

// Threads `in` through `children` in order; returns the output shape.
Shape infer_sequence(std::vector<LayerDesc>& children, const Shape& in, int64_t vocab) {
  Shape shape = in;
  for (LayerDesc& c : children) {
    infer_shapes(c, shape, false, vocab);
    shape = c.out_shape;
  }
  return shape;
}

}  // namespace

void infer_shapes(LayerDesc& l, const Shape& in, bool token_ids, int64_t vocab) {
  if (token_ids && l.kind != LayerKind::EMBEDDING)
    shape_error("its input is the model's token ids " + shape_string(in) +
                "; a model with a tokens input must start with an embedding");
  l.in_shape = in;
  l.out_shape = in;
  switch (l.kind) {
    case LayerKind::SEQUENTIAL:
    case LayerKind::RESIDUAL:
      l.out_shape = infer_sequence(l.children, in, vocab);
      if (l.kind == LayerKind::RESIDUAL && l.out_shape != in)
        shape_error("the residual body maps " + shape_string(in) + " to " + shape_string(l.out_shape) +
                    "; the body must keep the shape so it can be added to its input");
      break;
    case LayerKind::LINEAR: {
      int64_t k = in.back();
      l.out_shape.back() = l.out;
      l.parameter_count = mul(k, l.out) + (l.bias ? l.out : 0);
      l.gemm_rows = numel(in) / k;
      l.gemm_k = k;
      l.gemm_n = l.out;
      break;
    }
    case LayerKind::CONV2D: {
      need_rank(in, 3, "conv2d needs a (C, H, W) input", "move it before flatten or to_tokens");
      int64_t h = window_out(in[1], l.kernel, l.stride, l.padding, "height");
      int64_t w = window_out(in[2], l.kernel, l.stride, l.padding, "width");
      l.out_shape = {l.out, h, w};
      l.gemm_k = mul(in[0], mul(l.kernel, l.kernel));
      l.parameter_count = mul(l.out, l.gemm_k) + (l.bias ? l.out : 0);
      l.gemm_rows = mul(h, w);
      l.gemm_n = l.out;
      break;
    }
    case LayerKind::MAXPOOL2D:
      need_rank(in, 3, "maxpool2d needs a (C, H, W) input", "move it before flatten or to_tokens");
      l.out_shape = {in[0], window_out(in[1], l.kernel, l.stride, 0, "height"),
                     window_out(in[2], l.kernel, l.stride, 0, "width")};
      break;
    case LayerKind::GLOBAL_AVG_POOL:
      if (in.size() == 3) l.out_shape = {in[0]};
      else if (in.size() == 2) l.out_shape = {in[1]};
      else shape_error("global_avg_pool needs a (C, H, W) or (tokens, width) input, got " + shape_string(in));
      break;
    case LayerKind::FLATTEN: l.out_shape = {numel(in)}; break;
    case LayerKind::TO_TOKENS:
      need_rank(in, 3, "to_tokens needs a (C, H, W) input", "put it after the convolutions");
      l.out_shape = {mul(in[1], in[2]), in[0]};
      break;
    case LayerKind::POSITIONAL:
      need_rank(in, 2, "positional needs a (tokens, width) input", "put it after to_tokens");
      l.parameter_count = mul(in[0], in[1]);
      break;
    case LayerKind::LAYERNORM: l.parameter_count = mul(2, in.back()); break;
    case LayerKind::EMBEDDING:
      if (!token_ids)
        shape_error("an embedding takes the model's token ids, but its input is " + shape_string(in) +
                    "; use it as the first layer of a model whose input kind is tokens");
      l.out_shape = {in[0], l.out};
      l.parameter_count = mul(vocab, l.out) + mul(in[0], l.out);
      break;
    case LayerKind::ATTENTION: {
      need_rank(in, 2, "attention needs a (tokens, width) input", "add to_tokens or an embedding before it");
      int64_t c = in[1];
      if (c % l.heads != 0)
        shape_error("heads " + std::to_string(l.heads) + " does not divide the width " + std::to_string(c) +
                    "; choose a number of heads that divides " + std::to_string(c));
      l.children = {linear(l.name + ".qkv", mul(3, c)), linear(l.name + ".proj", c)};
      for (LayerDesc& child : l.children) infer_shapes(child, in, false, vocab);
      break;
    }
    case LayerKind::RELU:
    case LayerKind::GELU:
    case LayerKind::DROPOUT: break;
    case LayerKind::GRAPH:
    case LayerKind::BATCHNORM:
    case LayerKind::UNARY:
    case LayerKind::BINARY:
    case LayerKind::SOFTMAX:
    case LayerKind::AVGPOOL2D:
    case LayerKind::RESHAPE:
    case LayerKind::TRANSPOSE:
    case LayerKind::CONCAT:
    case LayerKind::MATMUL:
    case LayerKind::GATHER:
    case LayerKind::WHERE:
    case LayerKind::PAD:
      shape_error(std::string("layer kind ") + layer_kind_name(l.kind) +
                  " exists only in ONNX graphs, whose shapes planner/model_onnx.cpp infers");
  }
}

// transformer_block B -> B: [B.attn_res: [B.ln1, B.attn {qkv, proj}, (B.attn_drop)],
//                            B.mlp_res: [B.ln2, B.mlp.fc1, B.mlp.gelu, B.mlp.fc2, (B.mlp_drop)]]
LayerDesc transformer_block(const std::string& b, const Shape& in, int64_t heads, int64_t mlp_ratio,
                            bool causal, double dropout) {
  need_rank(in, 2, "transformer_block needs a (tokens, width) input", "add to_tokens or an embedding before it");
  LayerDesc attn = leaf(b + ".attn", LayerKind::ATTENTION);
  attn.heads = heads;
  attn.causal = causal;
  std::vector<LayerDesc> attn_body = {leaf(b + ".ln1", LayerKind::LAYERNORM), attn};
  std::vector<LayerDesc> mlp_body = {leaf(b + ".ln2", LayerKind::LAYERNORM),
                                     linear(b + ".mlp.fc1", mul(mlp_ratio, in[1])),
                                     leaf(b + ".mlp.gelu", LayerKind::GELU), linear(b + ".mlp.fc2", in[1])};
  if (dropout > 0) {
    attn_body.push_back(dropout_layer(b + ".attn_drop", dropout));
    mlp_body.push_back(dropout_layer(b + ".mlp_drop", dropout));
  }
  return container(b, LayerKind::SEQUENTIAL,
                   {container(b + ".attn_res", LayerKind::RESIDUAL, std::move(attn_body)),
                    container(b + ".mlp_res", LayerKind::RESIDUAL, std::move(mlp_body))});
}

}  // namespace qsync::model_layers
