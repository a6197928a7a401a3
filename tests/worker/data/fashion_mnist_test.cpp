// File: tests/worker/data/fashion_mnist_test.cpp
// Unit tests for worker/data/fashion_mnist.h: the installed Debian files load with the known
// counts, class balance and pixel statistics; damaged files written to a temp folder fail with
// errors that name the file, the problem and the fix.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "worker/data/fashion_mnist.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

bool installed() {
  return fs::exists(fashion_mnist_images_path(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TRAIN)) &&
         fs::exists(fashion_mnist_labels_path(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TRAIN)) &&
         fs::exists(fashion_mnist_images_path(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TEST)) &&
         fs::exists(fashion_mnist_labels_path(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TEST));
}

float normalized(int pixel) { return (float(pixel) / 255.0f - FASHION_MNIST_MEAN) / FASHION_MNIST_STD; }

TEST(FashionMnistInstalled, TrainSplitCountsBalanceAndStatistics) {
  if (!installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ImageDataset train = fashion_mnist_load(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TRAIN);
  ASSERT_EQ(train.count, 60000);
  EXPECT_EQ(train.channels, 1);
  EXPECT_EQ(train.height, 28);
  EXPECT_EQ(train.width, 28);
  EXPECT_EQ(train.classes, 10);
  ASSERT_EQ(train.images.size(), size_t(60000 * 784));
  ASSERT_EQ(train.labels.size(), size_t(60000));

  std::array<int64_t, 10> histogram{};
  for (int32_t l : train.labels) histogram.at(size_t(l)) += 1;
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[size_t(c)], 6000) << "class " << c;

  // The normalization constants are the training set's own: mean ~0, std ~1.
  double sum = 0, sum_sq = 0;
  for (float v : train.images) {
    sum += v;
    sum_sq += double(v) * v;
  }
  const double n = double(train.images.size());
  const double mean = sum / n, std_dev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std_dev, 1.0, 1e-3);

  // Known values: the first labels, and pixel (14, 14) of image 0 is 217.
  const std::vector<int32_t> first_labels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  EXPECT_EQ(std::vector<int32_t>(train.labels.begin(), train.labels.begin() + 10), first_labels);
  EXPECT_FLOAT_EQ(train.image(0)[14 * 28 + 14], normalized(217));
}

TEST(FashionMnistInstalled, TestSplitUnitScalingAndLimit) {
  if (!installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ImageDataset test = fashion_mnist_load(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TEST, 0, PixelScaling::UNIT);
  ASSERT_EQ(test.count, 10000);
  std::array<int64_t, 10> histogram{};
  for (int32_t l : test.labels) histogram.at(size_t(l)) += 1;
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[size_t(c)], 1000) << "class " << c;
  double sum = 0;
  for (float v : test.images) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / double(test.images.size()), 0.286849, 1e-5);  // mean of x/255 over t10k

  ImageDataset head = fashion_mnist_load(FASHION_MNIST_DEFAULT_DIR, FashionMnistSplit::TEST, 100, PixelScaling::UNIT);
  ASSERT_EQ(head.count, 100);
  ASSERT_EQ(head.images.size(), size_t(100 * 784));
  EXPECT_TRUE(std::equal(head.images.begin(), head.images.end(), test.images.begin()));
  EXPECT_TRUE(std::equal(head.labels.begin(), head.labels.end(), test.labels.begin()));
  double first_sum = 0;
  for (int i = 0; i < 784; ++i) first_sum += head.image(0)[i] * 255.0;
  EXPECT_NEAR(first_sum, 33456.0, 0.05);  // the byte sum of t10k image 0
  EXPECT_EQ(head.labels[1], 2);
}

// ---- synthetic files --------------------------------------------------------------------------

void put_be32(Bytes& b, int32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<unsigned char>(uint32_t(v) >> shift));
}

Bytes idx_images(int32_t magic, int32_t count, int32_t rows, int32_t cols, int64_t pixels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (int64_t i = 0; i < pixels; ++i) b.push_back(static_cast<unsigned char>(i % 256));
  return b;
}

Bytes idx_labels(int32_t magic, int32_t count, const Bytes& labels) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

Bytes gzip(const Bytes& raw) {
  uLongf size = compressBound(uLong(raw.size())) + 64;
  Bytes out(size);
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // 15 + 16: gzip wrapper
  s.next_in = const_cast<unsigned char*>(raw.data());
  s.avail_in = uInt(raw.size());
  s.next_out = out.data();
  s.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

class FashionMnistFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("qsync_fashion_mnist_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path images_path() const { return fashion_mnist_images_path(dir_.string(), FashionMnistSplit::TEST); }
  fs::path labels_path() const { return fashion_mnist_labels_path(dir_.string(), FashionMnistSplit::TEST); }

  // Three valid 28x28 images labelled 3, 9, 0, gzipped.
  void write_valid() {
    write_file(images_path(), gzip(idx_images(2051, 3, 28, 28, 3 * 784)));
    write_file(labels_path(), gzip(idx_labels(2049, 3, {3, 9, 0})));
  }

  // The message of the runtime_error that loading throws ("" when nothing is thrown).
  std::string load_error(int64_t limit = 0) const {
    try {
      fashion_mnist_load(dir_.string(), FashionMnistSplit::TEST, limit);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(FashionMnistFiles, ValidSyntheticFilesLoad) {
  write_valid();
  ImageDataset ds = fashion_mnist_load(dir_.string(), FashionMnistSplit::TEST, 0, PixelScaling::UNIT);
  ASSERT_EQ(ds.count, 3);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{3, 9, 0}));
  EXPECT_FLOAT_EQ(ds.image(1)[0], float(784 % 256) / 255.0f);
  ImageDataset two = fashion_mnist_load(dir_.string(), FashionMnistSplit::TEST, 2);
  EXPECT_EQ(two.count, 2);
  EXPECT_FLOAT_EQ(two.images[1], normalized(1));
}

TEST_F(FashionMnistFiles, UncompressedFilesAreReadWhenGzIsAbsent) {
  write_file(images_path().replace_extension(""), idx_images(2051, 1, 28, 28, 784));
  write_file(labels_path().replace_extension(""), idx_labels(2049, 1, {7}));
  ImageDataset ds = fashion_mnist_load(dir_.string(), FashionMnistSplit::TEST);
  EXPECT_EQ(ds.count, 1);
  EXPECT_EQ(ds.labels[0], 7);
}

TEST_F(FashionMnistFiles, MissingFilesNameThePathAndThePackage) {
  std::string e = load_error();
  EXPECT_NE(e.find(images_path().string()), std::string::npos) << e;
  EXPECT_NE(e.find("file not found"), std::string::npos) << e;
  EXPECT_NE(e.find("dataset-fashion-mnist"), std::string::npos) << e;
  EXPECT_NE(e.find("--data DIR"), std::string::npos) << e;
  write_file(images_path(), gzip(idx_images(2051, 3, 28, 28, 3 * 784)));
  e = load_error();
  EXPECT_NE(e.find(labels_path().string()), std::string::npos) << e;
}

TEST_F(FashionMnistFiles, BadMagicNumbers) {
  write_valid();
  write_file(images_path(), gzip(idx_images(2049, 3, 28, 28, 3 * 784)));
  std::string e = load_error();
  EXPECT_NE(e.find(images_path().string()), std::string::npos) << e;
  EXPECT_NE(e.find("bad magic number 2049 (expected 2051"), std::string::npos) << e;
  EXPECT_NE(e.find("reinstall"), std::string::npos) << e;
  write_valid();
  write_file(labels_path(), gzip(idx_labels(2051, 3, {3, 9, 0})));
  e = load_error();
  EXPECT_NE(e.find(labels_path().string() + ": bad magic number 2051 (expected 2049"), std::string::npos) << e;
}

TEST_F(FashionMnistFiles, WrongDimensionsAndCounts) {
  write_valid();
  write_file(images_path(), gzip(idx_images(2051, 3, 27, 28, 3 * 27 * 28)));
  EXPECT_NE(load_error().find("images are 27x28, expected 28x28"), std::string::npos) << load_error();
  write_valid();
  write_file(labels_path(), gzip(idx_labels(2049, 2, {3, 9})));
  EXPECT_NE(load_error().find("holds 2 labels but"), std::string::npos) << load_error();
  EXPECT_NE(load_error().find("count mismatch"), std::string::npos);
  write_file(images_path(), gzip(idx_images(2051, 0, 28, 28, 0)));
  EXPECT_NE(load_error().find("header claims 0 images"), std::string::npos) << load_error();
}

TEST_F(FashionMnistFiles, TruncatedDataAndTruncatedGzipStream) {
  write_valid();
  write_file(images_path(), gzip(idx_images(2051, 3, 28, 28, 2 * 784 + 100)));  // image 2 cut short
  std::string e = load_error();
  EXPECT_NE(e.find(images_path().string() + ": truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("images 0..2"), std::string::npos) << e;
  EXPECT_TRUE(load_error(2).empty()) << "the first two images are intact";

  write_valid();
  Bytes cut = gzip(idx_labels(2049, 3, {3, 9, 0}));
  cut.resize(cut.size() / 2);  // the gzip stream itself ends early
  write_file(labels_path(), cut);
  e = load_error();
  EXPECT_NE(e.find(labels_path().string()), std::string::npos) << e;
  EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("gzip") != std::string::npos) << e;
}

TEST_F(FashionMnistFiles, LabelOutOfRangeAndTrailingBytes) {
  write_valid();
  write_file(labels_path(), gzip(idx_labels(2049, 3, {3, 9, 10})));
  std::string e = load_error();
  EXPECT_NE(e.find(labels_path().string() + ": label 10 of sample 2 is out of range"), std::string::npos) << e;
  EXPECT_TRUE(load_error(2).empty()) << "limit 2 does not read label 2";

  write_valid();
  write_file(labels_path(), gzip(idx_labels(2049, 3, {3, 9, 0, 1})));
  EXPECT_NE(load_error().find("trailing bytes after 3 labels"), std::string::npos) << load_error();
}

TEST_F(FashionMnistFiles, NegativeLimitIsRejected) {
  write_valid();
  EXPECT_THROW(fashion_mnist_load(dir_.string(), FashionMnistSplit::TEST, -1), std::invalid_argument);
}

}  // namespace
}  // namespace qsync
