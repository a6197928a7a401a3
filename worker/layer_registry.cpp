// File: worker/layer_registry.cpp
// layer_create: the one table from LayerKind to the engine's layer classes.
#include <stdexcept>

#include "worker/layer.h"
#include "worker/layers/activation.h"
#include "worker/layers/attention.h"
#include "worker/layers/container.h"
#include "worker/layers/conv2d.h"
#include "worker/layers/dropout.h"
#include "worker/layers/embedding.h"
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
  }
  throw std::invalid_argument("layer '" + d.name + "': the engine has no implementation of kind " +
                              std::to_string(int(d.kind)));
}

}  // namespace qsync
