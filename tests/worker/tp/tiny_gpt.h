// File: tests/worker/tp/tiny_gpt.h
// A tiny char-GPT for the worker/tp tests: width 32, 4 heads, MLP 4x, 16-token context, 96-symbol
// vocabulary, randomly initialised by the training engine (Model), plus the engine's own forward
// (the oracle TP must match), deterministic token sequences and a scratch directory.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "worker/model.h"

namespace qsync::test {

inline std::string tiny_gpt_yaml(const std::string& name = "tiny-gpt", int blocks = 2, int width = 32, int heads = 4) {
  std::string y = "name: " + name +
                  "\ntask: language_model\ninput: {kind: tokens, seq_len: 16, vocab: 96}\nlayers:\n"
                  "  - {name: embed, type: embedding, dim: " + std::to_string(width) + "}\n";
  for (int b = 0; b < blocks; ++b)
    y += "  - {name: blocks." + std::to_string(b) + ", type: transformer_block, heads: " + std::to_string(heads) +
         ", mlp_ratio: 4, causal: true}\n";
  y += "  - {name: ln_f, type: layernorm}\n  - {name: head, type: linear, out: 96}\n";
  return y;
}

// A randomly initialised training-engine model.
struct TinyGpt {
  explicit TinyGpt(uint64_t seed = 7, const std::string& yaml = tiny_gpt_yaml())
      : desc(model_desc_parse(yaml, "tiny-gpt.yaml")), model(std::make_unique<Model>(desc, &memory, seed)) {}
  ModelDesc desc;
  MemoryAccount memory{0, "test"};
  std::unique_ptr<Model> model;

  // The engine's logits (B, T, V) for tokens (B, T) with T = the model's seq_len (eval mode).
  std::vector<float> logits(const std::vector<int32_t>& tokens, int64_t batch) {
    const int64_t T = desc.input_shape[0];
    Tensor x = Tensor::empty({batch, T}, Precision::FP32, &memory, "tokens");  // (B, T) ids as floats
    for (int64_t i = 0; i < batch * T; ++i) x.f32()[i] = float(tokens[size_t(i)]);
    StepContext ctx;
    ctx.memory = &memory;
    ctx.training = false;
    const Tensor y = model->forward(x, ctx);
    return std::vector<float>(y.f32(), y.f32() + y.numel());
  }
};

// n pseudo-random tokens in 0..95.
inline std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = int32_t(rng() % 96);
  return t;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30f;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// A fresh directory under the system temp dir, removed at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("qsync-tp-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace qsync::test
