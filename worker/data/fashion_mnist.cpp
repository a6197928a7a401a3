// File: worker/data/fashion_mnist.cpp
// Fashion-MNIST IDX reader (zlib gzread) with header, size and label validation.
#include "worker/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace qsync {
namespace {

constexpr int32_t IDX3_IMAGES_MAGIC = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr int32_t IDX1_LABELS_MAGIC = 2049;  // 0x00000801: unsigned byte, 1 dimension
constexpr int64_t MAX_SAMPLES = int64_t(1) << 24;  // a header claiming more is corrupt
constexpr int64_t IMAGES_PER_READ = 1024;

const char* FIX_MISSING =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or pass --data DIR, a folder holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
    "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz";
const char* FIX_CORRUPT =
    "the file is damaged: reinstall it (apt-get install --reinstall dataset-fashion-mnist) "
    "or pass --data DIR with intact Fashion-MNIST IDX files";

[[noreturn]] void fail(const std::string& path, const std::string& problem, const char* fix) {
  throw std::runtime_error("fashion-mnist: " + path + ": " + problem + "; " + fix);
}

// One open IDX file; reads are exact or throw.
class GzFile {
 public:
  // Opens `gz_path`, or its uncompressed twin (the name without ".gz") when only that exists.
  explicit GzFile(const std::string& gz_path) : path_(gz_path) {
    std::error_code ec;
    if (!std::filesystem::exists(gz_path, ec)) {
      const std::string plain = gz_path.ends_with(".gz") ? gz_path.substr(0, gz_path.size() - 3) : "";
      if (!plain.empty() && std::filesystem::exists(plain, ec)) path_ = plain;
      else fail(gz_path, "file not found", FIX_MISSING);
    }
    errno = 0;
    file_ = gzopen(path_.c_str(), "rb");  // reads plain files transparently
    if (!file_) fail(path_, std::string("cannot open (") + std::strerror(errno ? errno : EIO) + ")", FIX_MISSING);
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  const std::string& path() const { return path_; }

  // Reads exactly `bytes` bytes; `what` names them in the error ("the pixels of image 59999").
  void read_exact(void* dst, int64_t bytes, const std::string& what) {
    auto* out = static_cast<unsigned char*>(dst);
    int64_t done = 0;
    while (done < bytes) {
      unsigned chunk = unsigned(std::min<int64_t>(bytes - done, int64_t(1) << 30));
      int got = gzread(file_, out + done, chunk);
      if (got < int(chunk)) {
        int code = zlib_code();
        if (got >= 0 && (code == Z_OK || code == Z_BUF_ERROR)) {  // plain EOF, or a cut gzip stream
          fail(path_, "truncated: the data ends " + std::to_string(consumed_ + done + got) + " bytes in, inside " +
                          what, FIX_CORRUPT);
        }
        if (got < 0 || code != Z_OK) {
          fail(path_, std::string("not a valid gzip stream (") + zlib_message() + ") while reading " + what,
               FIX_CORRUPT);
        }
      }
      done += got;
    }
    consumed_ += bytes;
  }

  int32_t read_be_i32(const std::string& what) {
    unsigned char b[4];
    read_exact(b, 4, what);
    return int32_t((uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]));
  }

  // Throws when bytes remain after the data the header announced.
  void expect_end(const std::string& after) {
    unsigned char extra;
    int got = gzread(file_, &extra, 1);
    if (got < 0 || zlib_code() != Z_OK) {
      fail(path_, std::string("not a valid gzip stream (") + zlib_message() + ") after " + after, FIX_CORRUPT);
    }
    if (got > 0) fail(path_, "trailing bytes after " + after + " (header count too small?)", FIX_CORRUPT);
  }

 private:
  int zlib_code() {
    int code = Z_OK;
    gzerror(file_, &code);
    return code;
  }
  std::string zlib_message() {  // gzerror's text without the "<path>: " zlib puts in front
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    std::string text = msg && *msg ? msg : "unknown zlib error";
    if (text.starts_with(path_ + ": ")) text.erase(0, path_.size() + 2);
    return text;
  }

  std::string path_;
  gzFile file_ = nullptr;
  int64_t consumed_ = 0;
};

void check_magic(const GzFile& f, int32_t magic, int32_t expected, const char* kind) {
  if (magic != expected) {
    fail(f.path(), "bad magic number " + std::to_string(magic) + " (expected " + std::to_string(expected) +
                       " for an IDX " + kind + " file)", FIX_CORRUPT);
  }
}

void check_count(const GzFile& f, int32_t count, const char* noun) {
  if (count <= 0 || count > MAX_SAMPLES) {
    fail(f.path(), "header claims " + std::to_string(count) + " " + noun + " (expected 1.." +
                       std::to_string(MAX_SAMPLES) + ")", FIX_CORRUPT);
  }
}

}  // namespace

const char* fashion_mnist_split_prefix(FashionMnistSplit split) {
  return split == FashionMnistSplit::TRAIN ? "train" : "t10k";
}

std::string fashion_mnist_images_path(const std::string& dir, FashionMnistSplit split) {
  return (std::filesystem::path(dir) / (std::string(fashion_mnist_split_prefix(split)) + "-images-idx3-ubyte.gz"))
      .string();
}

std::string fashion_mnist_labels_path(const std::string& dir, FashionMnistSplit split) {
  return (std::filesystem::path(dir) / (std::string(fashion_mnist_split_prefix(split)) + "-labels-idx1-ubyte.gz"))
      .string();
}

ImageDataset fashion_mnist_load(const std::string& dir, FashionMnistSplit split, int64_t limit,
                                PixelScaling scaling) {
  if (limit < 0) {
    throw std::invalid_argument("fashion_mnist_load: limit " + std::to_string(limit) +
                                " is negative; pass 0 for the whole split or a positive sample count");
  }
  GzFile images(fashion_mnist_images_path(dir, split));
  GzFile labels(fashion_mnist_labels_path(dir, split));

  // Headers.
  check_magic(images, images.read_be_i32("the header"), IDX3_IMAGES_MAGIC, "image (idx3)");
  int32_t image_count = images.read_be_i32("the header");
  check_count(images, image_count, "images");
  int32_t rows = images.read_be_i32("the header");
  int32_t cols = images.read_be_i32("the header");
  if (rows != FASHION_MNIST_SIDE || cols != FASHION_MNIST_SIDE) {
    fail(images.path(), "images are " + std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28",
         FIX_CORRUPT);
  }
  check_magic(labels, labels.read_be_i32("the header"), IDX1_LABELS_MAGIC, "label (idx1)");
  int32_t label_count = labels.read_be_i32("the header");
  check_count(labels, label_count, "labels");
  if (label_count != image_count) {
    fail(labels.path(), "holds " + std::to_string(label_count) + " labels but " + images.path() + " holds " +
                            std::to_string(image_count) + " images (count mismatch)", FIX_CORRUPT);
  }

  ImageDataset ds;
  ds.count = limit > 0 ? std::min<int64_t>(limit, image_count) : image_count;
  ds.channels = 1;
  ds.height = rows;
  ds.width = cols;
  ds.classes = FASHION_MNIST_CLASSES;

  // Pixels, converted through a 256-entry table.
  std::array<float, 256> to_float{};
  for (int v = 0; v < 256; ++v) {
    float unit = float(v) / 255.0f;
    to_float[v] = scaling == PixelScaling::NORMALIZED ? (unit - FASHION_MNIST_MEAN) / FASHION_MNIST_STD : unit;
  }
  const int64_t per_image = ds.sample_numel();
  ds.images.resize(size_t(ds.count * per_image));  // (N, 1, 28, 28)
  std::vector<unsigned char> raw(size_t(IMAGES_PER_READ * per_image));
  for (int64_t first = 0; first < ds.count; first += IMAGES_PER_READ) {
    int64_t n = std::min(IMAGES_PER_READ, ds.count - first);
    images.read_exact(raw.data(), n * per_image,
                      "the pixels of images " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                          " (header promises " + std::to_string(image_count) + ")");
    float* out = ds.images.data() + first * per_image;
    for (int64_t i = 0; i < n * per_image; ++i) out[i] = to_float[raw[size_t(i)]];
  }

  // Labels.
  std::vector<unsigned char> raw_labels(size_t(ds.count));
  labels.read_exact(raw_labels.data(), ds.count,
                    "the labels (header promises " + std::to_string(label_count) + ")");
  ds.labels.resize(size_t(ds.count));  // (N)
  for (int64_t i = 0; i < ds.count; ++i) {
    if (raw_labels[size_t(i)] >= FASHION_MNIST_CLASSES) {
      fail(labels.path(), "label " + std::to_string(raw_labels[size_t(i)]) + " of sample " + std::to_string(i) +
                              " is out of range (classes are 0..9)", FIX_CORRUPT);
    }
    ds.labels[size_t(i)] = raw_labels[size_t(i)];
  }

  if (ds.count == image_count) {
    images.expect_end(std::to_string(image_count) + " images");
    labels.expect_end(std::to_string(label_count) + " labels");
  }
  return ds;
}

}  // namespace qsync
