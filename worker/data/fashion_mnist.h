// File: worker/data/fashion_mnist.h
// Fashion-MNIST for the training engine: reads the four gzipped IDX files that Debian's
// `dataset-fashion-mnist` package installs (/usr/share/datasets/fashion-mnist) into an
// ImageDataset of float images (N, 1, 28, 28) and int32 labels 0..9.
//
//   ImageDataset train = fashion_mnist_load(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TRAIN);
//   train.count == 60000; train.image(0) -> 784 floats; train.labels[0] == 9 (ankle boot)
//
// Files, per split ("train" 60000 samples, "t10k" 10000 samples):
//   <dir>/<split>-images-idx3-ubyte.gz  magic 2051, then count, rows (28), cols (28), pixels uint8
//   <dir>/<split>-labels-idx1-ubyte.gz  magic 2049, then count, labels uint8 (0..9)
// (IDX header integers are big-endian int32.) An uncompressed copy without the ".gz" suffix is
// read when the .gz file is absent. Everything a file gets wrong (missing, not gzip, bad magic,
// wrong dimensions, truncated, trailing bytes, label out of range, image/label count mismatch)
// throws std::runtime_error naming the file, the problem and the fix.
//
// Pixel scaling: PixelScaling::NORMALIZED (the default) gives (x/255 - 0.2860) / 0.3530, the
// training-set mean and standard deviation of x/255, so the training images have mean ~0 and
// standard deviation ~1 (range [-0.810, 2.023]); PixelScaling::UNIT gives x/255 in [0, 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qsync {

inline constexpr const char* FASHION_MNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist";
inline constexpr float FASHION_MNIST_MEAN = 0.2860f;  // of x/255 over the 60000 training images
inline constexpr float FASHION_MNIST_STD = 0.3530f;
inline constexpr int64_t FASHION_MNIST_CLASSES = 10;
inline constexpr int64_t FASHION_MNIST_SIDE = 28;

enum class FashionMnistSplit : uint8_t { TRAIN, TEST };
enum class PixelScaling : uint8_t { NORMALIZED, UNIT };

// Images of one split, batch first. Labels are class ids in [0, classes).
struct ImageDataset {
  int64_t count = 0, channels = 0, height = 0, width = 0;
  int64_t classes = 0;
  std::vector<float> images;    // (N, C, H, W)
  std::vector<int32_t> labels;  // (N)

  int64_t sample_numel() const { return channels * height * width; }
  const float* image(int64_t i) const { return images.data() + i * sample_numel(); }  // (C, H, W)
};

// "train" / "t10k", the file name prefix of the split.
const char* fashion_mnist_split_prefix(FashionMnistSplit split);
std::string fashion_mnist_images_path(const std::string& dir, FashionMnistSplit split);  // the .gz name
std::string fashion_mnist_labels_path(const std::string& dir, FashionMnistSplit split);

// Loads a split from `dir`. limit > 0 loads only the first `limit` samples (the files are
// still validated up to there; trailing-byte checks apply only to full loads).
ImageDataset fashion_mnist_load(const std::string& dir, FashionMnistSplit split, int64_t limit = 0,
                                PixelScaling scaling = PixelScaling::NORMALIZED);

}  // namespace qsync
