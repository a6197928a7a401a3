// File: worker/layers/broadcast.h
// Numpy broadcasting over batch-first tensors, for the ONNX graph's elementwise layers: an
// operand's full shape is right-aligned against the output's, dims of 1 repeat. for_each_broadcast
// walks every output element with each operand's element offset (an odometer, no divisions).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/model_desc.h"

namespace qsync {

// Strides (elements) of `operand` read at each dim of `out` (0 where it broadcasts or is absent).
inline std::vector<int64_t> broadcast_strides(const Shape& out, const Shape& operand) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < operand.size(); ++k) {
    const size_t od = operand.size() - 1 - k, o = out.size() - 1 - k;
    if (operand[od] != 1) strides[o] = s;
    s *= operand[od];
  }
  return strides;
}

// f(output index, offsets) with offsets[i] the element of operand i.
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<Shape>& operands, F&& f) {
  const size_t r = out.size(), n = operands.size();
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& s : operands) strides.push_back(broadcast_strides(out, s));
  std::vector<int64_t> idx(r, 0), off(n, 0);
  int64_t total = 1;
  for (int64_t d : out) total *= d;
  for (int64_t o = 0; o < total; ++o) {
    f(o, off.data());
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      for (size_t i = 0; i < n; ++i) off[i] += strides[i][d];
      if (idx[d] < out[d]) break;
      for (size_t i = 0; i < n; ++i) off[i] -= strides[i][d] * out[d];
      idx[d] = 0;
    }
  }
}

}  // namespace qsync
