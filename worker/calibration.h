// File: worker/calibration.h
// `qsync-worker calibrate`: a short FP32 training run that records, per GEMM-like layer, the
// statistics the planner's precision indicators need (planner/indicator.h, docs/indicator.md),
// as running means over the steps.
//
//   qsync-worker calibrate --model cnn --steps 10 --out cnn.calib.json
//
// The statistics come from a LayerObserver (worker/layer.h) that Linear and Conv2d call with
// their operands. Conv2d is measured as its GEMM sees it: the input is the im2col matrix, so
// x_numel = B*H'*W'*C*k*k and x_norm = ||im2col(x)||_F (computed exactly from the image, each
// pixel weighted by how many output positions read it), y_numel = B*O*H'*W'.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/indicator.h"
#include "planner/model_desc.h"
#include "worker/layer.h"

namespace qsync {

struct CalibrateConfig {
  std::string model;        // zoo name or model file
  std::string data;         // as for train: Fashion-MNIST dir (default) or a text file
  std::string out;          // the stats file (JSON); empty: not written
  int64_t steps = 10;
  int64_t batch = 128;
  uint64_t seed = 1;
  std::string device_class;  // empty: the strongest CPU class available
  int threads = 1;
  bool quiet = false;        // no per-layer report on stdout
};

// Parses the arguments after `calibrate`; throws std::invalid_argument naming the bad flag.
CalibrateConfig calibrate_parse_args(int argc, char** argv);
extern const char* CALIBRATE_USAGE;

// Trains `steps` FP32 steps (AdamW, the train defaults) while observing every GEMM layer; writes
// the stats to config.out (atomically) when set, and returns them.
CalibrationStats calibrate_run(const CalibrateConfig& config);

// The observer behind calibrate_run, usable on any Model: forward and backward calls of a layer
// add one sample each to its running means.
class CalibrationObserver : public LayerObserver {
 public:
  explicit CalibrationObserver(const ModelDesc& model);
  void gemm_forward(const Layer& layer, const Tensor& x, const Tensor& w) override;
  void gemm_backward(const Layer& layer, const Tensor& dy, const Tensor& dw) override;
  // The means so far, in forward order, depth = index among the model's GEMM layers. Throws
  // std::logic_error when a GEMM layer saw no forward or no backward.
  CalibrationStats stats(int64_t steps, int64_t batch) const;

 private:
  struct Sums {
    int depth = 0;
    int64_t forwards = 0, backwards = 0;
    LayerStats sum;  // sums of the per-call values (element counts: the last call's)
  };
  std::string model_name_;
  uint64_t model_hash_ = 0;
  std::vector<std::string> order_;  // the GEMM layers in forward order
  std::map<std::string, Sums> layers_;
};

// ||im2col(x)||_F and max |x| over the pixels some output position reads, for x (B, C, H, W)
// and the geometry of `conv` (a CONV2D LayerDesc). Exposed for tests.
struct ColumnNorm {
  double norm = 0, amax = 0;
};
ColumnNorm conv_column_norm(const LayerDesc& conv, const Tensor& x);

}  // namespace qsync
