// File: worker/profile_casts.cpp
// The cast costs of a device profile (profile_fit_casts, declared in profiler.h): each cast the
// worker makes, timed alone over eight sizes and fitted as seconds = a * numel + b.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "planner/device_profile.h"
#include "planner/median.h"
#include "worker/ops/device_ops.h"
#include "worker/precision_ops.h"
#include "worker/profiler.h"

namespace qsync {
namespace {

// The cast sizes: 8 sizes from 4K to 4M elements, geometric, multiples of 1024.
std::vector<int64_t> cast_sizes() {
  std::vector<int64_t> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(std::max<int64_t>(1, std::llround(4.0 * std::pow(1024.0, i / 7.0))) * 1024);
  return out;
}

}  // namespace

void profile_fit_casts(DeviceProfile& p, StepContext& ctx, int reps) {
  StepContext c = ctx;
  c.timer = nullptr;
  c.training = true;
  const std::vector<int64_t> sizes = cast_sizes();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // One fit per cast: `run(x)` performs the cast of x (FP32, shape (n / 1024, 1024)) and returns
  // the seconds of the cast alone.
  DeviceOps& ops = ops_of(c);
  auto fit = [&](const std::function<double(const Tensor&)>& run) {
    std::vector<double> seconds;
    for (int64_t n : sizes) {
      Tensor host = Tensor::empty({n / 1024, 1024}, Precision::FP32, ops.device().is_host() ? c.memory : nullptr,
                                  "cast benchmark input");
      for (int64_t i = 0; i < n; ++i) host.f32()[i] = normal(rng);
      Tensor x = host;
      if (!ops.device().is_host()) {
        x = ops.empty(host.shape(), Precision::FP32, c.memory, "cast benchmark input");
        tensor_copy_from_host(host, x);
      }
      std::vector<double> t;
      (void)run(x);  // warm-up
      for (int r = 0; r < reps; ++r) t.push_back(run(x));
      seconds.push_back(median_of(t));
    }
    return fit_linear_cost(sizes, seconds);
  };
  // The seconds of f on the device's timeline (host clock, or CUDA events and a synchronize).
  auto timed = [&](const std::function<void()>& f) {
    struct One : OpTimer {
      double seconds = 0;
      void record(const std::string&, double s) override { seconds += s; }
    } one;
    const TimeMark t0 = ops.time_mark();
    f();
    ops.record_time(one, "cast", t0, ops.time_mark());
    ops.synchronize();
    return one.seconds;
  };
  const std::string name = "profile";
  for (LayerPrecision lp : {LayerPrecision::BF16, LayerPrecision::FP16, LayerPrecision::INT8, LayerPrecision::FP8})
    p.casts[{Precision::FP32, layer_precision_traits(lp).forward}] = fit([&](const Tensor& x) {
      return timed([&] { (void)cast_activation(x, lp, c, name, OperandRole::A); });
    });
  p.channel_casts[{Precision::FP32, Precision::INT8}] = fit([&](const Tensor& x) {
    return timed([&] { (void)cast_weight(x, LayerPrecision::INT8, c, name, OperandRole::B); });
  });
  // A plain FP32 copy: what the gradient sync pays per element into and out of its buckets.
  p.casts[{Precision::FP32, Precision::FP32}] = fit([&](const Tensor& x) {
    Tensor target = ops.empty(x.shape(), Precision::FP32, nullptr, "copy benchmark target");
    return timed([&] { ops.copy(x, target); });
  });
  p.casts[{Precision::INT8, c.sixteen_bit}] = fit([&](const Tensor& x) {
    const Tensor q = cast_activation(x, LayerPrecision::INT8, c, name, OperandRole::A);
    return timed([&] { (void)backward_operand(q, LayerPrecision::INT8, c, name); });
  });
}

}  // namespace qsync
