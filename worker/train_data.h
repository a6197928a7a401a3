// File: worker/train_data.h
// The training engine's view of its data: sharded training batches and the evaluation set, for
// image classification (Fashion-MNIST) and character language models alike, chosen by the
// model's input kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "planner/model_desc.h"
#include "worker/data/batch_loader.h"
#include "worker/tensor.h"

namespace qsync {

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  // Image models: `data` is a Fashion-MNIST directory; token models: a text file.
  // eval_limit > 0 caps the evaluation set (samples / windows).
  static std::unique_ptr<TrainingData> open(const ModelDesc& model, const std::string& data,
                                            const BatchSharding& sharding, uint64_t seed, int64_t eval_limit);

  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t train_samples() const = 0;
  virtual LoaderPosition position() const = 0;
  virtual void set_position(LoaderPosition p) = 0;
  // This rank's next batch: x (local_batch, input_shape...) FP32 and targets (local_batch) or
  // (local_batch * T).
  virtual void next(Tensor& x, std::vector<int32_t>& targets) = 0;

  virtual int64_t eval_batches() const = 0;
  virtual int64_t eval_batch_size(int64_t i) const = 0;
  // Evaluation batch i into x (its leading dim is the batch size) and targets.
  virtual void eval_batch(int64_t i, Tensor& x, std::vector<int32_t>& targets) const = 0;

  // Loss positions per sample: 1 (classification) or T (language model).
  virtual int64_t positions_per_sample() const = 0;
  virtual std::string describe() const = 0;  // "fashion-mnist: 60000 train / 10000 test"
};

}  // namespace qsync
