// File: worker/train_setup.h
// The setup of a training rank, beside the loop of worker/trainer.cpp: its plan (and whether its
// device class runs it), its local batch, the agreement checks across ranks (settings, weights,
// devices, loss scaling), the plan summary and the evaluation pass.
#pragma once

#include <string>
#include <vector>

#include "worker/dist/collectives.h"
#include "worker/loss_scale.h"
#include "worker/model.h"
#include "worker/train_data.h"
#include "worker/trainer.h"

namespace qsync {

class RankStep;

Shape batch_shape(const ModelDesc& m, int64_t batch);
// --plan or --precision (fp32 when neither).
RankPlan load_plan(const TrainConfig& c, const ModelDesc& m);
// Throws std::invalid_argument when the device class cannot run a layer's planned precision
// (GPU classes never emulate; CPU classes refuse tf32), naming the layer and the fix.
void check_plan_runs_on(const RankPlan& plan, const ModelDesc& m, const DeviceClass& device, int rank);
RendezvousConfig rendezvous_for(const TrainConfig& c);
// Every rank's local batch: the plan's, or the global batch split evenly (remainder to low ranks).
std::vector<int64_t> local_batches(const TrainConfig& c, const RankPlan& plan, Collectives& coll);
// Every rank must run the same job: compares a fingerprint of the settings that must agree.
void check_settings_agree(const TrainConfig& c, const ModelDesc& m, int64_t total_steps, int64_t global_batch,
                          Collectives& coll);
void check_weights_agree(const Model& model, Collectives& coll, int64_t step);
std::string plan_summary(const RankPlan& plan, const ModelDesc& m);
// Whether a GPU rank's plan runs a backward GEMM in FP16 (dynamic loss scaling's reason).
bool plan_has_fp16_backward(const RankPlan& plan, const ModelDesc& m, const DeviceClass& device);
// What the ranks tell each other at start: all on CUDA (then gradients go over NCCL), and
// whether any rank wants loss scaling (then all scale alike).
struct JobDevices {
  bool all_cuda = false, loss_scaling = false;
};
JobDevices job_devices_agree(Collectives& coll, bool cuda, bool wants_loss_scaling);
// --loss-scale auto|dynamic|none; auto follows the job.
LossScaling loss_scaling_resolve(const std::string& flag, bool job_wants);
// The planner's prediction of this rank's step alone: its profile (measured in `profiles_dir`, or
// the class's estimate) replayed at its plan and local batch. Leaves the summary's predictions at
// 0 when there is no profile for the class.
void predict_rank(const TrainConfig& c, const ModelDesc& m, const RankPlan& plan, const DeviceClass& device,
                  int64_t local_batch, TrainSummary& s);
// Rank 0's evaluation over the test set, on the model's device.
EvalResult evaluate(Model& model, const TrainingData& data, StepContext ctx, RankStep& step);

}  // namespace qsync
