// File: worker/layer_registry.cpp
// layer_create: the one table from LayerKind to the engine's layer classes.
#include <stdexcept>

#include "worker/layer.h"
#include "worker/layers/activation.h"
#include "worker/layers/attention.h"
#include "worker/layers/batchnorm.h"
#include "worker/layers/container.h"
#include "worker/layers/conv2d.h"
#include "worker/layers/dropout.h"
#include "worker/layers/elementwise.h"
#include "worker/layers/embedding.h"
#include "worker/layers/graph.h"
#include "worker/layers/graph_ops.h"
#include "worker/layers/layernorm.h"
#include "worker/layers/linear.h"
#include "worker/layers/pool.h"
#include "worker/layers/reshape.h"

namespace qsync {

std::unique_ptr<Layer> layer_create(const LayerDesc& d, MemoryAccount* memory) {
  switch (d.kind) {
    case LayerKind::SEQUENTIAL: return std::make_unique<SequentialLayer>(d, memory);
    case LayerKind::RESIDUAL: return std::make_unique<ResidualLayer>(d, memory);
    case LayerKind::LINEAR: return std::make_unique<LinearLayer>(d, memory);
    case LayerKind::CONV2D: return std::make_unique<Conv2dLayer>(d, memory);
    case LayerKind::ATTENTION: return std::make_unique<AttentionLayer>(d, memory);
    case LayerKind::RELU: return std::make_unique<ReluLayer>(d, memory);
    case LayerKind::GELU: return std::make_unique<GeluLayer>(d, memory);
    case LayerKind::MAXPOOL2D: return std::make_unique<MaxPool2dLayer>(d, memory);
    case LayerKind::GLOBAL_AVG_POOL: return std::make_unique<GlobalAvgPoolLayer>(d, memory);
    case LayerKind::FLATTEN: return std::make_unique<FlattenLayer>(d, memory);
    case LayerKind::TO_TOKENS: return std::make_unique<ToTokensLayer>(d, memory);
    case LayerKind::POSITIONAL: return std::make_unique<PositionalLayer>(d, memory);
    case LayerKind::LAYERNORM: return std::make_unique<LayerNormLayer>(d, memory);
    case LayerKind::EMBEDDING: return std::make_unique<EmbeddingLayer>(d, memory);
    case LayerKind::DROPOUT: return std::make_unique<DropoutLayer>(d, memory);
    case LayerKind::GRAPH: return std::make_unique<GraphLayer>(d, memory);
    case LayerKind::BATCHNORM: return std::make_unique<BatchNormLayer>(d, memory);
    case LayerKind::UNARY: return std::make_unique<UnaryLayer>(d, memory);
    case LayerKind::BINARY: return std::make_unique<BinaryLayer>(d, memory);
    case LayerKind::SOFTMAX: return std::make_unique<SoftmaxLayer>(d, memory);
    case LayerKind::AVGPOOL2D: return std::make_unique<AvgPool2dLayer>(d, memory);
    case LayerKind::RESHAPE: return std::make_unique<ReshapeLayer>(d, memory);
    case LayerKind::TRANSPOSE: return std::make_unique<TransposeLayer>(d, memory);
    case LayerKind::CONCAT: return std::make_unique<ConcatLayer>(d, memory);
    case LayerKind::MATMUL: return std::make_unique<MatMulLayer>(d, memory);
    case LayerKind::GATHER: return std::make_unique<GatherLayer>(d, memory);
    case LayerKind::WHERE: return std::make_unique<WhereLayer>(d, memory);
    case LayerKind::PAD: return std::make_unique<PadLayer>(d, memory);
  }
  throw std::invalid_argument("layer '" + d.name + "': the engine has no implementation of kind " +
                              std::to_string(int(d.kind)));
}

}  // namespace qsync
