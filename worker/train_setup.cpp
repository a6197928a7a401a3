// File: worker/train_setup.cpp
// The setup of a training rank (see train_setup.h).
#include "worker/train_setup.h"

#include <stdexcept>

#include "planner/device_profile.h"
#include "planner/replayer.h"
#include "worker/loss.h"
#include "worker/train_step.h"

namespace qsync {

Shape batch_shape(const ModelDesc& m, int64_t batch) {
  Shape s = m.input_shape;
  s.insert(s.begin(), batch);
  return s;
}

RankPlan load_plan(const TrainConfig& c, const ModelDesc& m) {
  if (!c.plan_path.empty()) {
    if (!c.precision.empty()) throw std::invalid_argument("pass either --plan or --precision, not both");
    return plan_file_load(c.plan_path, m);
  }
  return plan_uniform(m, c.precision.empty() ? LayerPrecision::FP32 : layer_precision_from_name(c.precision));
}

RendezvousConfig rendezvous_for(const TrainConfig& c) {
  return rendezvous_config_with_overrides(c.rank, c.world_size, c.master_addr, c.master_port,
                                          c.collective_timeout_seconds);
}

// Every rank's local batch: the plan's, or the global batch split evenly (remainder to low ranks).
std::vector<int64_t> local_batches(const TrainConfig& c, const RankPlan& plan, Collectives& coll) {
  const int world = coll.world_size(), rank = coll.rank();
  const int64_t mine = plan.local_batch > 0 ? plan.local_batch : c.batch / world + (rank < c.batch % world ? 1 : 0);
  if (mine <= 0)
    throw std::invalid_argument("rank " + std::to_string(rank) + " gets an empty local batch (global batch " +
                                std::to_string(c.batch) + " over " + std::to_string(world) + " ranks): raise --batch");
  const uint64_t in = uint64_t(mine);
  std::vector<uint64_t> all(static_cast<size_t>(world));
  coll.all_gather(&in, all.data(), 1);
  return {all.begin(), all.end()};
}

// Every rank must run the same job: compares a fingerprint of the settings that must agree.
void check_settings_agree(const TrainConfig& c, const ModelDesc& m, int64_t total_steps, int64_t global_batch,
                          Collectives& coll) {
  uint64_t h = m.hash;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(uint64_t(total_steps));
  mix(uint64_t(global_batch));
  mix(c.seed);
  mix(uint64_t(c.weight_hash_every));
  mix(uint64_t(c.optimizer.kind));
  mix(std::hash<double>{}(c.optimizer.lr));
  mix(uint64_t(c.optimizer.schedule));
  mix(uint64_t(c.bucket_bytes));
  std::vector<uint64_t> all(static_cast<size_t>(coll.world_size()));
  coll.all_gather(&h, all.data(), 1);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw std::invalid_argument("rank " + std::to_string(r) + " runs other settings than rank 0 (model, steps, batch, "
                                  "seed, optimizer, lr, schedule, bucket size or --weight-hash-every differ): start every rank "
                                  "with the same job flags");
}

void check_weights_agree(const Model& model, Collectives& coll, int64_t step) {
  const uint64_t h = model.weight_hash();
  std::vector<uint64_t> all(static_cast<size_t>(coll.world_size()));
  coll.all_gather(&h, all.data(), 1);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw std::runtime_error("weights differ across ranks at step " + std::to_string(step) + ": rank " +
                               std::to_string(r) + " hash " + std::to_string(all[r]) + " vs rank 0 " +
                               std::to_string(all[0]) + " (a bug: please report it with the plan files)");
}

std::string plan_summary(const RankPlan& plan, const ModelDesc& m) {
  std::string s;
  for (const LayerDesc* l : model_gemm_layers(m))
    s += (s.empty() ? "" : " ") + l->name + "=" + layer_precision_name(plan.precision_of(l->name));
  return s;
}

EvalResult evaluate(Model& model, const TrainingData& data, StepContext ctx, RankStep& step) {
  ctx.training = false;
  ctx.backward_listener = nullptr;
  DeviceOps& ops = model.ops();
  EvalResult r;
  double loss_sum = 0, correct = 0, positions = 0;
  std::vector<int32_t> targets;
  for (int64_t i = 0; i < data.eval_batches(); ++i) {
    const int64_t b = data.eval_batch_size(i);
    Tensor x = Tensor::empty(batch_shape(model.desc(), b), Precision::FP32, ops.device().is_host() ? ctx.memory : nullptr,
                             "eval batch");
    data.eval_batch(i, x, targets);
    Tensor device_targets;
    const Tensor xd = step.upload(x, targets, device_targets);
    const Tensor logits = model.forward(xd, ctx);
    softmax_cross_entropy_check(logits.shape(), targets, 1.0f);
    SoftmaxXentResult res;
    softmax_cross_entropy_enqueue(ops, logits, device_targets, 1.0f, 1.0f, ctx.memory, res);
    ops.synchronize();
    res.settle();
    loss_sum += res.loss_sum;
    correct += double(res.correct);
    positions += double(targets.size());
    r.samples += b;
  }
  r.loss = positions > 0 ? loss_sum / positions : 0;
  r.accuracy = positions > 0 ? correct / positions : 0;
  return r;
}

void check_plan_runs_on(const RankPlan& plan, const ModelDesc& m, const DeviceClass& device, int rank) {
  for (const LayerDesc* l : model_gemm_layers(m)) {
    const LayerPrecisionSupport s = layer_precision_support(device, plan.precision_of(l->name));
    if (!s.ok)
      throw std::invalid_argument("rank " + std::to_string(rank) + " runs as " + device.name + ", and its plan gives layer '" +
                                  l->name + "' a precision it cannot run: " + s.why);
  }
}

bool plan_has_fp16_backward(const RankPlan& plan, const ModelDesc& m, const DeviceClass& device) {
  if (device.kind != DeviceKind::CUDA) return false;  // CPU classes emulate 16-bit numerics in FP32 GEMMs
  for (const LayerDesc* l : model_gemm_layers(m)) {
    const LayerPrecisionGemms g = layer_precision_gemms(device, plan.precision_of(l->name));
    if (g.backward_gradient == Precision::FP16) return true;
  }
  return false;
}

JobDevices job_devices_agree(Collectives& coll, bool cuda, bool wants_loss_scaling) {
  const uint64_t mine = (cuda ? 1u : 0u) | (wants_loss_scaling ? 2u : 0u);
  std::vector<uint64_t> all(size_t(coll.world_size()));
  coll.all_gather(&mine, all.data(), 1);
  JobDevices j;
  j.all_cuda = true;
  for (uint64_t v : all) {
    j.all_cuda = j.all_cuda && (v & 1u) != 0;
    j.loss_scaling = j.loss_scaling || (v & 2u) != 0;
  }
  return j;
}

void predict_rank(const TrainConfig& c, const ModelDesc& m, const RankPlan& plan, const DeviceClass& device,
                  int64_t local_batch, TrainSummary& s) {
  DeviceProfile profile;
  try {
    profile = ProfileStore(c.profiles_dir).find(m, device.name, local_batch);
  } catch (const std::exception&) {
    return;  // CPU classes without a measured profile: no prediction
  }
  ReplayRank r{&profile, plan};
  r.plan.local_batch = local_batch;
  const RankPrediction p = replay_step(m, {r}, CommProfile{}, c.bucket_bytes).ranks.at(0);
  s.predicted_compute_seconds = p.compute_seconds;
  s.predicted_peak_memory_bytes = p.peak_memory_bytes;
}

LossScaling loss_scaling_resolve(const std::string& flag, bool job_wants) {
  if (flag.empty() || flag == "auto") return job_wants ? LossScaling::DYNAMIC : LossScaling::NONE;
  if (flag == "dynamic") return LossScaling::DYNAMIC;
  if (flag == "none") return LossScaling::NONE;
  throw std::invalid_argument("--loss-scale " + flag + ": use auto, dynamic or none");
}

}  // namespace qsync
