// File: worker/data/batch_loader.h
// Deterministic, sharded batches for synchronous data-parallel training, and fixed-order
// evaluation batches.
//
// Global batches and shards. Every rank of a job builds the same loader (same data, seed and
// local batch sizes) with its own rank. Step s of the job has one global batch of
// B = sum(local_batches) samples; rank r takes the contiguous slice starting at
// offset(r) = local_batches[0] + ... + local_batches[r-1]. With local batches 64/32/32, rank 0
// takes rows 0..63, rank 1 rows 64..95, rank 2 rows 96..127, so the concatenation of the ranks'
// local batches of a step is exactly the batch that one rank with local batch 128 gets, in the
// same order; training on N heterogeneous ranks sees the same samples as one large rank.
//
// Images: each epoch is a permutation of the dataset, Fisher-Yates driven by std::mt19937_64
// (whose output sequence the C++ standard fixes) seeded from (seed, epoch), with bounded draws
// by rejection sampling (std::shuffle and std::uniform_int_distribution are implementation-
// defined, so they would differ between standard libraries). Global batch s of an epoch is
// permutation[s*B, (s+1)*B); the last incomplete global batch is dropped, so
// steps_per_epoch = N / B and every sample is used at most once per epoch (exactly once when B
// divides N).
//
// Tokens (character language models): global batch s holds B windows of seq_len + 1 tokens at
// start positions drawn uniformly from [0, N - seq_len - 1] by std::mt19937_64 seeded from
// (seed, global step), global step = epoch * steps_per_epoch + step, and sharded as above.
// Inputs are the first seq_len tokens of each window as float token ids (the engine's token
// convention), targets the next-character ids (int32). An "epoch" is N / (B * seq_len) steps
// (at least 1), about one pass over the tokens.
//
// Position: (epoch, step in epoch) of the next batch; save it in a checkpoint and set_position()
// on a fresh loader with the same arguments to resume the identical sequence of batches.
//
// Evaluation: ImageEvalBatches / TokenEvalBatches walk the whole test set (token set: windows at
// 0, T, 2T, ...) in file order in batches of `batch`, the last one possibly smaller; not sharded
// (each rank that evaluates reads all of it).
//
// The loaders keep a reference to the dataset or tokens: those must outlive them.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "worker/data/fashion_mnist.h"

namespace qsync {

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t step = 0;  // in the epoch, 0 .. steps_per_epoch - 1
  bool operator==(const LoaderPosition&) const = default;
};

// The local batch sizes of all ranks and which rank this is.
class BatchSharding {
 public:
  // local_batches[r]: rank r's local batch (> 0); rank in [0, local_batches.size()).
  BatchSharding(std::vector<int64_t> local_batches, int rank);
  // One rank with the whole global batch.
  static BatchSharding single(int64_t global_batch);

  int rank() const { return rank_; }
  int world_size() const { return int(local_batches_.size()); }
  const std::vector<int64_t>& local_batches() const { return local_batches_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t local_batch() const { return local_batches_[size_t(rank_)]; }
  int64_t offset() const { return offset_; }  // first row of this rank's slice in the global batch

 private:
  std::vector<int64_t> local_batches_;
  int rank_ = 0;
  int64_t global_batch_ = 0, offset_ = 0;
};

// splitmix64 of `seed` combined with `stream`: the seed of one random stream (an epoch, a step).
uint64_t loader_stream_seed(uint64_t seed, uint64_t stream);
// Uniform in [0, bound) from raw mt19937_64 output (rejection sampling; portable).
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);
// The sample order of `epoch`: a permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);
// The same into `order`, reusing its buffer (a new epoch allocates nothing in the steady state).
void epoch_permutation_into(int64_t n, uint64_t seed, int64_t epoch, std::vector<int64_t>& order);

class ImageBatchLoader {
 public:
  ImageBatchLoader(const ImageDataset& data, BatchSharding sharding, uint64_t seed);

  const BatchSharding& sharding() const { return sharding_; }
  int64_t local_batch() const { return sharding_.local_batch(); }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  LoaderPosition position() const { return position_; }
  // Throws std::out_of_range when `p` is not a position of this loader (e.g. a checkpoint written
  // with another global batch).
  void set_position(LoaderPosition p);

  // Dataset indices of this rank's slice at `p`, in batch order.
  std::vector<int64_t> local_indices(LoaderPosition p) const;
  // Writes this rank's slice of the batch at position() into images (local_batch, C, H, W) and
  // labels (local_batch), advances, and returns the position of the batch written.
  LoaderPosition next(std::span<float> images, std::span<int32_t> labels);

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  const ImageDataset* data_;
  BatchSharding sharding_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  LoaderPosition position_;
  mutable int64_t cached_epoch_ = -1;  // the permutation of one epoch is kept; not thread-safe
  mutable std::vector<int64_t> cached_permutation_;
};

class TokenBatchLoader {
 public:
  // tokens: the training part of a CharCorpus (ids 0..95), at least seq_len + 1 of them.
  TokenBatchLoader(std::span<const int32_t> tokens, int64_t seq_len, BatchSharding sharding, uint64_t seed);

  const BatchSharding& sharding() const { return sharding_; }
  int64_t local_batch() const { return sharding_.local_batch(); }
  int64_t seq_len() const { return seq_len_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  LoaderPosition position() const { return position_; }
  void set_position(LoaderPosition p);

  // Window start positions of this rank's slice at `p`, in batch order.
  std::vector<int64_t> local_starts(LoaderPosition p) const;
  // Writes inputs (local_batch, T) as float token ids and targets (local_batch, T) as the next
  // token ids, advances, and returns the position of the batch written.
  LoaderPosition next(std::span<float> inputs, std::span<int32_t> targets);

 private:
  std::span<const int32_t> tokens_;
  int64_t seq_len_;
  BatchSharding sharding_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  LoaderPosition position_;
};

class ImageEvalBatches {
 public:
  ImageEvalBatches(const ImageDataset& data, int64_t batch);
  int64_t num_batches() const { return num_batches_; }
  int64_t batch_size(int64_t i) const;  // `batch`, or less for the last one
  int64_t first_sample(int64_t i) const { return i * batch_; }
  // Writes batch i into images (batch_size(i), C, H, W) and labels (batch_size(i)); the spans may
  // be larger (rows past batch_size(i) are left untouched). Returns batch_size(i).
  int64_t fill(int64_t i, std::span<float> images, std::span<int32_t> labels) const;

 private:
  const ImageDataset* data_;
  int64_t batch_, num_batches_;
};

class TokenEvalBatches {
 public:
  // Windows at 0, T, 2T, ... while a full window of T + 1 tokens fits.
  TokenEvalBatches(std::span<const int32_t> tokens, int64_t seq_len, int64_t batch);
  int64_t num_windows() const { return num_windows_; }
  int64_t num_batches() const { return num_batches_; }
  int64_t batch_size(int64_t i) const;
  // Writes batch i into inputs (batch_size(i), T) and targets (batch_size(i), T). Returns batch_size(i).
  int64_t fill(int64_t i, std::span<float> inputs, std::span<int32_t> targets) const;

 private:
  std::span<const int32_t> tokens_;
  int64_t seq_len_, batch_, num_windows_, num_batches_;
};

}  // namespace qsync
