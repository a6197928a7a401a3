// File: worker/layers/shape_check.h
// Shape checks shared by the layers: a tensor handed to forward/backward must be
// (B, per-sample shape...) with the per-sample shape the model description resolved.
//   check_batched(x, d.in_shape, d.name, "input")  ->  B, or std::invalid_argument:
//   "layer 'relu1': input has shape (8, 3, 4), expected (B, 3, 5)"
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "planner/model_desc.h"
#include "worker/tensor.h"

namespace qsync {

// (B, per_sample...).
inline Shape batched_shape(int64_t batch, const Shape& per_sample) {
  Shape s{batch};
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

inline std::string batched_shape_string(const Shape& per_sample) {
  std::string s = "(B";
  for (int64_t d : per_sample) s += ", " + std::to_string(d);
  return s + ")";
}

inline std::string tensor_shape_string(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// Returns the batch size B of `t`, which must be FP32 and (B, per_sample...).
inline int64_t check_batched(const Tensor& t, const Shape& per_sample, const std::string& layer, const char* what) {
  const Shape& s = t.shape();
  bool ok = t.defined() && s.size() == per_sample.size() + 1;
  for (size_t i = 0; ok && i < per_sample.size(); ++i) ok = s[i + 1] == per_sample[i];
  if (!ok)
    throw std::invalid_argument("layer '" + layer + "': " + what + " has shape " +
                                (t.defined() ? tensor_shape_string(s) : std::string("(undefined)")) +
                                ", expected " + batched_shape_string(per_sample));
  if (t.precision() != Precision::FP32)
    throw std::invalid_argument("layer '" + layer + "': " + what + " is " + precision_name(t.precision()) +
                                ", expected fp32");
  return s[0];
}

// A per-sample shape resolved by the model description must match what the layer computes.
inline void check_resolved_shape(const Shape& resolved, const Shape& computed, const std::string& layer,
                                 const char* what) {
  if (!resolved.empty() && resolved != computed)
    throw std::invalid_argument("layer '" + layer + "': " + what + " " + tensor_shape_string(resolved) +
                                " does not match the computed " + tensor_shape_string(computed));
}

}  // namespace qsync
