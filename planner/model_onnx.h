// File: planner/model_onnx.h
// An ONNX model (as torch.onnx.export writes it) as a model description: one GRAPH layer whose
// children are the graph's nodes in topological order, each an engine layer kind (Conv -> conv2d,
// Gemm and MatMul with a constant weight (+ its bias Add) -> linear, Relu, LayerNormalization, ...)
// with its activation inputs (graph_inputs), constant operands and initial weights (the
// initializers). The planner costs it like a zoo model; the worker builds and trains it.
//
// Names: a node's ONNX name with the leading '/' dropped and '/' -> '.' ("/layer1/layer1.0/conv1/Conv"
// -> "layer1.layer1.0.conv1.Conv"); a GEMM-like node (the layers plans give precisions to) also
// drops its op type ("layer1.layer1.0.conv1"). The batch is the first dimension of the one graph
// input: exported with any batch (dynamic or fixed), trained with the local batch. A float input
// is an image (C, H, W); an int64 input of (T) token ids feeds a Gather (embedding). The one output
// gives the task: (classes) classification, (T, vocab) language model.
//
// Constant folding happens here for what PyTorch leaves unfolded (Constant, Transpose and Cast of
// initializers, Identity). Initializers a node trains (conv/linear/norm weights, embedding tables,
// a full-tensor operand of Add/Mul/Sub/Div such as learned positions) become parameters; scalars,
// integer/bool tensors and tensors with non-finite values are constants. Any other op is refused
// before anything is built, naming the node, its op type and onnx_supported_ops().
#pragma once

#include <string>
#include <string_view>

#include "planner/model_desc.h"

namespace qsync {

// Builds the description of the ONNX model `bytes`; `source_name` names it in errors; the model's
// name is `model_name`, or when empty the file stem of `source_name` (what the worker sees: a
// ConfigMap key "model.onnx" mounted as a file is "model"). Throws std::invalid_argument
// (malformed files: onnx::OnnxFormatError, which is one) naming the node and the fix.
ModelDesc model_desc_from_onnx(std::string_view bytes, const std::string& source_name,
                               const std::string& model_name = "");
ModelDesc model_desc_load_onnx(const std::string& path);
// "Add, AveragePool, BatchNormalization, ...": the ONNX ops the engine trains.
std::string onnx_supported_ops();
// True when `path` names an ONNX file (extension .onnx).
bool is_onnx_path(const std::string& path);

}  // namespace qsync
