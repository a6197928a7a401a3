// File: worker/train_data.cpp
// Image and token implementations of TrainingData over worker/data/.
#include "worker/train_data.h"

#include <cstring>
#include <stdexcept>

#include "worker/data/char_corpus.h"
#include "worker/data/fashion_mnist.h"

namespace qsync {
namespace {

constexpr int64_t EVAL_BATCH = 500;

// Images padded to the model's size when it asks for a larger one of the same channels (Fashion-MNIST's
// 28 x 28 for a CIFAR-sized 32 x 32 ResNet): centered, borders filled with each image's corner
// pixel (the background). Other mismatches are left for the shape check to refuse.
ImageDataset pad_to_model(ImageDataset d, const Shape& want) {
  if (want.size() != 3 || want[0] != d.channels || want[1] < d.height || want[2] < d.width ||
      (want[1] - d.height) % 2 != 0 || (want[2] - d.width) % 2 != 0 || (want[1] == d.height && want[2] == d.width))
    return d;
  const int64_t H = want[1], W = want[2], ph = (H - d.height) / 2, pw = (W - d.width) / 2;
  std::vector<float> out(size_t(d.count * d.channels * H * W));
  for (int64_t n = 0; n < d.count; ++n)
    for (int64_t c = 0; c < d.channels; ++c) {
      const float* src = d.images.data() + (n * d.channels + c) * d.height * d.width;
      float* dst = out.data() + (n * d.channels + c) * H * W;
      std::fill(dst, dst + H * W, src[0]);
      for (int64_t y = 0; y < d.height; ++y) std::copy(src + y * d.width, src + (y + 1) * d.width, dst + (y + ph) * W + pw);
    }
  d.images = std::move(out);
  d.height = H;
  d.width = W;
  return d;
}

class ImageTrainingData final : public TrainingData {
 public:
  ImageTrainingData(const ModelDesc& m, const std::string& dir, const BatchSharding& sharding, uint64_t seed,
                    int64_t eval_limit)
      : train_(pad_to_model(fashion_mnist_load(dir, FashionMnistSplit::TRAIN), m.input_shape)),
        test_(pad_to_model(fashion_mnist_load(dir, FashionMnistSplit::TEST, eval_limit), m.input_shape)),
        loader_(train_, sharding, seed),
        eval_(test_, EVAL_BATCH) {
    const Shape sample = {train_.channels, train_.height, train_.width};
    if (sample != m.input_shape)
      throw std::invalid_argument("model '" + m.name + "' expects images " + shape_string(m.input_shape) + " but " +
                                  dir + " holds " + shape_string(sample));
    if (m.classes != train_.classes)
      throw std::invalid_argument("model '" + m.name + "' has " + std::to_string(m.classes) + " classes, the data " +
                                  std::to_string(train_.classes));
  }
  int64_t steps_per_epoch() const override { return loader_.steps_per_epoch(); }
  int64_t train_samples() const override { return train_.count; }
  LoaderPosition position() const override { return loader_.position(); }
  void set_position(LoaderPosition p) override { loader_.set_position(p); }
  void next(Tensor& x, std::vector<int32_t>& targets) override {
    targets.resize(size_t(loader_.local_batch()));
    loader_.next({x.f32(), size_t(x.numel())}, targets);
  }
  int64_t eval_batches() const override { return eval_.num_batches(); }
  int64_t eval_batch_size(int64_t i) const override { return eval_.batch_size(i); }
  void eval_batch(int64_t i, Tensor& x, std::vector<int32_t>& targets) const override {
    targets.resize(size_t(eval_.batch_size(i)));
    eval_.fill(i, {x.f32(), size_t(x.numel())}, targets);
  }
  int64_t positions_per_sample() const override { return 1; }
  std::string describe() const override {
    return "fashion-mnist: " + std::to_string(train_.count) + " train / " + std::to_string(test_.count) + " test images";
  }

 private:
  ImageDataset train_, test_;
  ImageBatchLoader loader_;
  ImageEvalBatches eval_;
};

class TokenTrainingData final : public TrainingData {
 public:
  TokenTrainingData(const ModelDesc& m, const std::string& path, const BatchSharding& sharding, uint64_t seed,
                    int64_t eval_limit)
      : seq_len_(m.input_shape.at(0)),
        corpus_(char_corpus_load(path, seq_len_, 0.1)),
        loader_(corpus_.train, seq_len_, sharding, seed),
        eval_(std::span<const int32_t>(corpus_.validation.data(),
                                       eval_limit > 0 ? std::min<size_t>(corpus_.validation.size(),
                                                                         size_t(eval_limit * seq_len_ + 1))
                                                      : corpus_.validation.size()),
              seq_len_, EVAL_BATCH / 10) {
    if (m.vocab != CHAR_VOCAB_SIZE)
      throw std::invalid_argument("model '" + m.name + "' has vocab " + std::to_string(m.vocab) +
                                  "; the character corpus has " + std::to_string(CHAR_VOCAB_SIZE) + " symbols");
  }
  int64_t steps_per_epoch() const override { return loader_.steps_per_epoch(); }
  int64_t train_samples() const override { return int64_t(corpus_.train.size()) / seq_len_; }
  LoaderPosition position() const override { return loader_.position(); }
  void set_position(LoaderPosition p) override { loader_.set_position(p); }
  void next(Tensor& x, std::vector<int32_t>& targets) override {
    targets.resize(size_t(x.numel()));
    loader_.next({x.f32(), size_t(x.numel())}, targets);
  }
  int64_t eval_batches() const override { return eval_.num_batches(); }
  int64_t eval_batch_size(int64_t i) const override { return eval_.batch_size(i); }
  void eval_batch(int64_t i, Tensor& x, std::vector<int32_t>& targets) const override {
    targets.resize(size_t(eval_.batch_size(i) * seq_len_));
    eval_.fill(i, {x.f32(), size_t(x.numel())}, targets);
  }
  int64_t positions_per_sample() const override { return seq_len_; }
  std::string describe() const override {
    return corpus_.source + ": " + std::to_string(corpus_.train.size()) + " train / " +
           std::to_string(corpus_.validation.size()) + " validation characters";
  }

 private:
  int64_t seq_len_;
  CharCorpus corpus_;
  TokenBatchLoader loader_;
  TokenEvalBatches eval_;
};

}  // namespace

std::unique_ptr<TrainingData> TrainingData::open(const ModelDesc& model, const std::string& data,
                                                 const BatchSharding& sharding, uint64_t seed, int64_t eval_limit) {
  if (model.input_kind == InputKind::IMAGE)
    return std::make_unique<ImageTrainingData>(model, data.empty() ? FASHION_MNIST_DEFAULT_DIR : data, sharding, seed,
                                               eval_limit);
  if (data.empty())
    throw std::invalid_argument("model '" + model.name + "' reads characters: pass --data FILE (any text file)");
  return std::make_unique<TokenTrainingData>(model, data, sharding, seed, eval_limit);
}

}  // namespace qsync
