// File: worker/train_step.cpp
// One training step on the rank's device (see train_step.h).
#include "worker/train_step.h"

#include <cstring>
#include <map>

#include "worker/dist/running_stats_sync.h"

#if defined(QSYNC_WITH_CUDA)
#include "worker/ops/cuda/cuda_ops.h"
#endif

namespace qsync {
namespace {

// The step's phases on the device's timeline.
class PhaseTimes : public OpTimer {
 public:
  void record(const std::string& op, double seconds) override { seconds_[op] += seconds; }
  double operator[](const std::string& op) const {
    const auto it = seconds_.find(op);
    return it == seconds_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> seconds_;
};

void fill_targets(const std::vector<int32_t>& targets, Tensor& host) {
  if (!targets.empty()) std::memcpy(host.data(), targets.data(), targets.size() * sizeof(int32_t));
}

}  // namespace

RankStep::RankStep(Model& model, Optimizer& opt, GradientSync* sync, LossScaler& scaler, const Shape& batch_shape,
                   int64_t positions, MemoryAccount* memory, Collectives* collectives)
    : model_(model), opt_(opt), sync_(sync), collectives_(collectives), scaler_(scaler), memory_(memory) {
  DeviceOps& ops = model.ops();
  x_host_ = Tensor::empty(batch_shape, Precision::FP32, ops.device().is_host() ? memory : nullptr, "input batch");
  targets_host_ = Tensor::empty({positions}, Precision::FP32, nullptr, "targets");  // int32
  if (ops.device().is_host()) {
    x_dev_ = x_host_;
    targets_dev_ = targets_host_;
    return;
  }
  x_dev_ = ops.empty(batch_shape, Precision::FP32, memory, "input batch");
  targets_dev_ = ops.empty({positions}, Precision::FP32, memory, "targets");
#if defined(QSYNC_WITH_CUDA)
  if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) {  // pinned staging: the uploads do not block
    cuda->pin_host(x_host_.data(), x_host_.bytes());
    cuda->pin_host(targets_host_.data(), targets_host_.bytes());
    registered_ = {x_host_.data(), targets_host_.data()};
  }
#endif
}

RankStep::~RankStep() {
#if defined(QSYNC_WITH_CUDA)
  if (auto* cuda = dynamic_cast<CudaOps*>(&model_.ops()))
    for (void* p : registered_) cuda->unpin_host(p);
#endif
}

StepOutcome RankStep::run(StepContext& ctx, float loss_divisor) {
  DeviceOps& ops = model_.ops();
  PhaseTimes phases;
  const TimeMark start = ops.time_mark();
  fill_targets(targets_, targets_host_);
  if (!ops.device().is_host()) {
    ops.copy(x_host_, x_dev_);  // pinned -> device, on the compute stream
    ops.copy(targets_host_, targets_dev_);
  }
  model_.zero_grad();
  if (sync_ != nullptr) sync_->begin_step();
  const Tensor logits = model_.forward(x_dev_, ctx);
  if (after_forward) after_forward();
  softmax_cross_entropy_check(logits.shape(), targets_, loss_divisor);
  SoftmaxXentResult res;
  softmax_cross_entropy_enqueue(ops, logits, targets_dev_, loss_divisor, scaler_.scale(), memory_, res);
  model_.backward(res.dlogits, ctx);
  const TimeMark computed = ops.time_mark();
  ops.record_time(phases, "compute", start, computed);
  if (sync_ != nullptr) sync_->finish_step();
  const TimeMark update = ops.time_mark();
  opt_.step(ctx.step, scaler_.inverse(), scaler_.enabled());
  ops.record_time(phases, "optimizer", update, ops.time_mark());
  if (sync_ != nullptr) sync_->await_completion();
  ops.synchronize();  // the step's one wait for the device
  if (collectives_ != nullptr) running_statistics_all_reduce(model_, *collectives_);  // host buffers
  res.settle();
  opt_.settle();
  StepOutcome out;
  out.loss_sum = res.loss_sum;
  out.correct = res.correct;
  out.skipped = opt_.last_result().skipped;
  scaler_.update(out.skipped);
  out.compute_seconds = phases["compute"];
  out.optimizer_seconds = phases["optimizer"];
  out.wait_seconds = sync_ != nullptr ? sync_->last_wait_seconds() : 0.0;
  out.allreduce_seconds = sync_ != nullptr ? sync_->last_allreduce_seconds() : 0.0;
  return out;
}

Tensor RankStep::upload(const Tensor& x, const std::vector<int32_t>& targets, Tensor& device_targets) {
  DeviceOps& ops = model_.ops();
  Tensor t = Tensor::empty({int64_t(targets.size())}, Precision::FP32, nullptr, "eval targets");
  fill_targets(targets, t);
  if (ops.device().is_host()) {
    device_targets = t;
    return x;
  }
  Tensor xd = ops.empty(x.shape(), Precision::FP32, memory_, "eval batch");
  tensor_copy_from_host(x, xd);
  device_targets = ops.empty(t.shape(), Precision::FP32, memory_, "eval targets");
  tensor_copy_from_host(t, device_targets);
  return xd;
}

}  // namespace qsync
