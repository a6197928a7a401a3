// File: worker/tp/tp_evaluate.cpp
// Held-out next-token quality of a TpTransformer (any dropped set, simulation or real rank):
// windows of `window` inputs (window k at k * stride) with the next tokens as targets, each window
// one prefill from an empty cache, `batch` windows per forward; cross-entropy in double, argmax
// accuracy, overall and per window.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "worker/tp/tp_transformer.h"

namespace qsync {

TpQuality tp_evaluate(TpTransformer& model, const std::vector<int32_t>& tokens, int64_t window, int64_t max_windows,
                      int64_t batch, int64_t stride) {
  if (window < 1 || window > model.max_tokens())
    throw std::invalid_argument("tp_evaluate: window " + std::to_string(window) + " must be in 1.." +
                                std::to_string(model.max_tokens()) + " (the model's context)");
  if (batch < 1) throw std::invalid_argument("tp_evaluate: batch must be at least 1");
  if (stride == 0) stride = window;
  if (stride < window)
    throw std::invalid_argument("tp_evaluate: stride " + std::to_string(stride) + " is shorter than the window " +
                                std::to_string(window) + "; windows may not overlap");
  const int64_t n = int64_t(tokens.size());
  int64_t windows = n < window + 1 ? 0 : (n - window - 1) / stride + 1;  // window k needs k * stride + window + 1
  if (max_windows > 0) windows = std::min(windows, max_windows);
  if (windows < 1)
    throw std::invalid_argument("tp_evaluate: " + std::to_string(tokens.size()) + " tokens hold no window of " +
                                std::to_string(window) + " inputs plus one target; use more text or a smaller window");
  const int64_t V = model.vocab();
  TpQuality q;
  double loss = 0;
  int64_t correct = 0, positions = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += batch) {
    const int64_t nb = std::min(batch, windows - w0);
    std::vector<int32_t> inputs(size_t(nb * window));  // (nb, window)
    for (int64_t b = 0; b < nb; ++b)
      std::copy_n(tokens.begin() + (w0 + b) * stride, window, inputs.begin() + b * window);
    model.reset(nb);
    const std::vector<float> logits = model.forward(inputs, nb);  // (nb, window, V)
    for (int64_t b = 0; b < nb; ++b) {
      double window_loss = 0;
      int64_t window_correct = 0;
      for (int64_t t = 0; t < window; ++t) {
        const float* row = logits.data() + (b * window + t) * V;
        const int32_t target = tokens[size_t((w0 + b) * stride + t + 1)];
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v)
          if (row[v] > row[best]) best = v;
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - double(row[best]));
        const double position_loss = std::log(sum) - (double(row[target]) - double(row[best]));
        loss += position_loss;
        window_loss += position_loss;
        correct += best == target ? 1 : 0;
        window_correct += best == target ? 1 : 0;
        ++positions;
      }
      q.window_loss.push_back(window_loss / double(window));
      q.window_accuracy.push_back(double(window_correct) / double(window));
    }
  }
  q.positions = positions;
  q.loss = loss / double(positions);
  q.perplexity = std::exp(q.loss);
  q.accuracy = double(correct) / double(positions);
  return q;
}

}  // namespace qsync
