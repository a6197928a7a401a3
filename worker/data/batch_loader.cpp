// File: worker/data/batch_loader.cpp
// Epoch permutations, rank slices of global batches, loader positions and eval batches.
#include "worker/data/batch_loader.h"

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

namespace qsync {
namespace {

constexpr uint64_t IMAGE_EPOCH_STREAM = 0x1a6e5ULL;
constexpr uint64_t TOKEN_STEP_STREAM = 0x70ce25ULL;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "/" : "") + std::to_string(v[i]);
  return s;
}

std::string shape_of(std::initializer_list<int64_t> dims) {  // "(8, 1, 28, 28)"
  std::string s = "(";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + ")";
}

int64_t numel_of(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Training batches: the buffer must be exactly the batch.
void check_buffer(size_t have, std::initializer_list<int64_t> dims, const char* what) {
  if (int64_t(have) != numel_of(dims)) {
    throw std::invalid_argument(std::string("batch loader: the ") + what + " buffer holds " + std::to_string(have) +
                                " elements, the batch is " + shape_of(dims) + " = " + std::to_string(numel_of(dims)) +
                                "; size it from the loader's local_batch()");
  }
}

// Eval batches: the buffer may be larger (sized for full batches).
void check_buffer_at_least(size_t have, std::initializer_list<int64_t> dims, const char* what) {
  if (int64_t(have) < numel_of(dims)) {
    throw std::invalid_argument(std::string("eval batches: the ") + what + " buffer holds " + std::to_string(have) +
                                " elements, the batch is " + shape_of(dims) + " = " + std::to_string(numel_of(dims)) +
                                "; size it for the evaluation batch size");
  }
}

void check_position(LoaderPosition p, int64_t steps_per_epoch, const std::string& about) {
  if (p.epoch < 0 || p.step < 0 || p.step >= steps_per_epoch) {
    throw std::out_of_range("batch loader: position (epoch " + std::to_string(p.epoch) + ", step " +
                            std::to_string(p.step) + ") is not in this loader (" + std::to_string(steps_per_epoch) +
                            " steps per epoch, " + about +
                            "); restore a checkpoint with the data, seed and batch sizes it was written with");
  }
}

LoaderPosition advance(LoaderPosition p, int64_t steps_per_epoch) {
  if (++p.step == steps_per_epoch) return {p.epoch + 1, 0};
  return p;
}

void check_eval_args(int64_t batch, int64_t count, const char* what) {
  if (batch <= 0) {
    throw std::invalid_argument(std::string("eval batches: batch ") + std::to_string(batch) +
                                " must be positive; pass the evaluation batch size");
  }
  if (count <= 0) throw std::invalid_argument(std::string("eval batches: the ") + what + " is empty");
}

}  // namespace

// ---- sharding ---------------------------------------------------------------------------------

BatchSharding::BatchSharding(std::vector<int64_t> local_batches, int rank)
    : local_batches_(std::move(local_batches)), rank_(rank) {
  if (local_batches_.empty()) {
    throw std::invalid_argument("batch sharding: no ranks; pass one local batch size per rank (e.g. 64/32/32)");
  }
  if (rank_ < 0 || rank_ >= int(local_batches_.size())) {
    throw std::invalid_argument("batch sharding: rank " + std::to_string(rank_) + " is outside 0.." +
                                std::to_string(local_batches_.size() - 1) + " for local batches " +
                                join(local_batches_) + "; pass one local batch size per rank");
  }
  for (size_t r = 0; r < local_batches_.size(); ++r) {
    if (local_batches_[r] <= 0) {
      throw std::invalid_argument("batch sharding: rank " + std::to_string(r) + " has local batch " +
                                  std::to_string(local_batches_[r]) + " in " + join(local_batches_) +
                                  "; every rank needs a positive local batch (drop the rank from the plan)");
    }
    if (int(r) < rank_) offset_ += local_batches_[r];
    global_batch_ += local_batches_[r];
  }
}

BatchSharding BatchSharding::single(int64_t global_batch) { return BatchSharding({global_batch}, 0); }

// ---- random streams ---------------------------------------------------------------------------

uint64_t loader_stream_seed(uint64_t seed, uint64_t stream) { return splitmix64(seed ^ splitmix64(stream)); }

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  // Reject the low values that would make `r % bound` biased: 2^64 mod bound of them.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order;
  epoch_permutation_into(n, seed, epoch, order);
  return order;
}

void epoch_permutation_into(int64_t n, uint64_t seed, int64_t epoch, std::vector<int64_t>& order) {
  order.resize(size_t(std::max<int64_t>(n, 0)));  // same n every epoch: no allocation past the first
  std::iota(order.begin(), order.end(), int64_t(0));
  std::mt19937_64 rng(loader_stream_seed(seed, IMAGE_EPOCH_STREAM + uint64_t(epoch) * 0x100000001b3ULL));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = int64_t(uniform_below(rng, uint64_t(i) + 1));
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
}

// ---- images -----------------------------------------------------------------------------------

ImageBatchLoader::ImageBatchLoader(const ImageDataset& data, BatchSharding sharding, uint64_t seed)
    : data_(&data), sharding_(std::move(sharding)), seed_(seed), steps_per_epoch_(0) {
  steps_per_epoch_ = data.count / sharding_.global_batch();
  if (steps_per_epoch_ == 0) {
    throw std::invalid_argument("image batch loader: the dataset has " + std::to_string(data.count) +
                                " samples, fewer than one global batch of " +
                                std::to_string(sharding_.global_batch()) + " (local batches " +
                                join(sharding_.local_batches()) + "); lower the batch sizes or load more samples");
  }
}

void ImageBatchLoader::set_position(LoaderPosition p) {
  check_position(p, steps_per_epoch_, "global batch " + std::to_string(sharding_.global_batch()) + " over " +
                                          std::to_string(data_->count) + " samples");
  position_ = p;
}

const std::vector<int64_t>& ImageBatchLoader::permutation(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    epoch_permutation_into(data_->count, seed_, epoch, cached_permutation_);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> ImageBatchLoader::local_indices(LoaderPosition p) const {
  check_position(p, steps_per_epoch_, "global batch " + std::to_string(sharding_.global_batch()));
  const std::vector<int64_t>& order = permutation(p.epoch);
  auto first = order.begin() + p.step * sharding_.global_batch() + sharding_.offset();
  return std::vector<int64_t>(first, first + sharding_.local_batch());
}

LoaderPosition ImageBatchLoader::next(std::span<float> images, std::span<int32_t> labels) {
  const int64_t per_sample = data_->sample_numel();
  check_buffer(images.size(), {local_batch(), data_->channels, data_->height, data_->width}, "images");
  check_buffer(labels.size(), {local_batch()}, "labels");
  const LoaderPosition at = position_;
  std::vector<int64_t> rows = local_indices(at);
  for (size_t b = 0; b < rows.size(); ++b) {
    const float* src = data_->image(rows[b]);
    std::copy(src, src + per_sample, images.begin() + int64_t(b) * per_sample);
    labels[b] = data_->labels[size_t(rows[b])];
  }
  position_ = advance(at, steps_per_epoch_);
  return at;
}

// ---- tokens -----------------------------------------------------------------------------------

TokenBatchLoader::TokenBatchLoader(std::span<const int32_t> tokens, int64_t seq_len, BatchSharding sharding,
                                   uint64_t seed)
    : tokens_(tokens), seq_len_(seq_len), sharding_(std::move(sharding)), seed_(seed), steps_per_epoch_(0) {
  if (seq_len_ <= 0) {
    throw std::invalid_argument("token batch loader: seq_len " + std::to_string(seq_len_) +
                                " must be positive (the model's input seq_len)");
  }
  if (int64_t(tokens_.size()) < seq_len_ + 1) {
    throw std::invalid_argument("token batch loader: " + std::to_string(tokens_.size()) +
                                " tokens, fewer than one window of seq_len + 1 = " + std::to_string(seq_len_ + 1) +
                                "; use a longer corpus or a shorter seq_len");
  }
  steps_per_epoch_ = std::max<int64_t>(1, int64_t(tokens_.size()) / (sharding_.global_batch() * seq_len_));
}

void TokenBatchLoader::set_position(LoaderPosition p) {
  check_position(p, steps_per_epoch_, std::to_string(tokens_.size()) + " tokens, global batch " +
                                          std::to_string(sharding_.global_batch()) + ", seq_len " +
                                          std::to_string(seq_len_));
  position_ = p;
}

std::vector<int64_t> TokenBatchLoader::local_starts(LoaderPosition p) const {
  check_position(p, steps_per_epoch_, "global batch " + std::to_string(sharding_.global_batch()));
  const uint64_t global_step = uint64_t(p.epoch * steps_per_epoch_ + p.step);
  std::mt19937_64 rng(loader_stream_seed(seed_, TOKEN_STEP_STREAM + global_step * 0x100000001b3ULL));
  const uint64_t positions = uint64_t(tokens_.size()) - uint64_t(seq_len_);  // starts 0 .. N - T - 1
  std::vector<int64_t> starts;
  starts.reserve(size_t(local_batch()));
  for (int64_t b = 0; b < sharding_.offset() + local_batch(); ++b) {
    int64_t s = int64_t(uniform_below(rng, positions));  // draw the whole prefix: ranks share the stream
    if (b >= sharding_.offset()) starts.push_back(s);
  }
  return starts;
}

LoaderPosition TokenBatchLoader::next(std::span<float> inputs, std::span<int32_t> targets) {
  check_buffer(inputs.size(), {local_batch(), seq_len_}, "inputs");
  check_buffer(targets.size(), {local_batch(), seq_len_}, "targets");
  const LoaderPosition at = position_;
  std::vector<int64_t> starts = local_starts(at);
  for (size_t b = 0; b < starts.size(); ++b) {
    const int32_t* window = tokens_.data() + starts[b];  // (T + 1)
    float* in = inputs.data() + int64_t(b) * seq_len_;
    int32_t* out = targets.data() + int64_t(b) * seq_len_;
    for (int64_t t = 0; t < seq_len_; ++t) {
      in[t] = float(window[t]);
      out[t] = window[t + 1];
    }
  }
  position_ = advance(at, steps_per_epoch_);
  return at;
}

// ---- evaluation -------------------------------------------------------------------------------

ImageEvalBatches::ImageEvalBatches(const ImageDataset& data, int64_t batch)
    : data_(&data), batch_(batch), num_batches_(0) {
  check_eval_args(batch, data.count, "image dataset");
  num_batches_ = (data.count + batch - 1) / batch;
}

int64_t ImageEvalBatches::batch_size(int64_t i) const {
  if (i < 0 || i >= num_batches_) {
    throw std::out_of_range("eval batches: batch " + std::to_string(i) + " is outside 0.." +
                            std::to_string(num_batches_ - 1));
  }
  return std::min(batch_, data_->count - i * batch_);
}

int64_t ImageEvalBatches::fill(int64_t i, std::span<float> images, std::span<int32_t> labels) const {
  const int64_t n = batch_size(i), per_sample = data_->sample_numel();
  check_buffer_at_least(images.size(), {n, data_->channels, data_->height, data_->width}, "images");
  check_buffer_at_least(labels.size(), {n}, "labels");
  const float* src = data_->image(first_sample(i));
  std::copy(src, src + n * per_sample, images.begin());
  std::copy(data_->labels.begin() + first_sample(i), data_->labels.begin() + first_sample(i) + n, labels.begin());
  return n;
}

TokenEvalBatches::TokenEvalBatches(std::span<const int32_t> tokens, int64_t seq_len, int64_t batch)
    : tokens_(tokens), seq_len_(seq_len), batch_(batch), num_windows_(0), num_batches_(0) {
  if (seq_len <= 0) throw std::invalid_argument("eval batches: seq_len must be positive");
  num_windows_ = tokens.empty() ? 0 : (int64_t(tokens.size()) - 1) / seq_len;
  check_eval_args(batch, num_windows_, "token set (fewer than seq_len + 1 tokens)");
  num_batches_ = (num_windows_ + batch - 1) / batch;
}

int64_t TokenEvalBatches::batch_size(int64_t i) const {
  if (i < 0 || i >= num_batches_) {
    throw std::out_of_range("eval batches: batch " + std::to_string(i) + " is outside 0.." +
                            std::to_string(num_batches_ - 1));
  }
  return std::min(batch_, num_windows_ - i * batch_);
}

int64_t TokenEvalBatches::fill(int64_t i, std::span<float> inputs, std::span<int32_t> targets) const {
  const int64_t n = batch_size(i);
  check_buffer_at_least(inputs.size(), {n, seq_len_}, "inputs");
  check_buffer_at_least(targets.size(), {n, seq_len_}, "targets");
  for (int64_t b = 0; b < n; ++b) {
    const int32_t* window = tokens_.data() + (i * batch_ + b) * seq_len_;  // (T + 1)
    for (int64_t t = 0; t < seq_len_; ++t) {
      inputs[size_t(b * seq_len_ + t)] = float(window[t]);
      targets[size_t(b * seq_len_ + t)] = window[t + 1];
    }
  }
  return n;
}

}  // namespace qsync
