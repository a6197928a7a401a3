// File: worker/trainer.cpp
// One rank's training run: single-process, or one rank of a synchronous data-parallel job
// (gradients all-reduced in buckets during backward, FP32 master weights identical everywhere).
// Here its world, model, data, optimizer, resume and gradient sync are set up and its summary
// finished; the steps run in worker/train_loop.cpp.
#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "worker/checkpoint_resume.h"
#include "worker/checkpoint_store.h"
#include "worker/dist/collectives.h"
#include "worker/dist/link_model.h"
#include "worker/loss.h"
#include "worker/model.h"
#include "worker/precision_ops.h"
#include "worker/op_time_table.h"
#include "worker/telemetry.h"
#include "worker/stop_signal_watcher.h"
#include "worker/ops/rank_device.h"
#include "worker/train_data.h"
#include "worker/train_events.h"
#include "worker/train_loop.h"
#include "worker/train_setup.h"
#include "worker/train_step.h"
#if defined(QSYNC_WITH_CUDA)
#include "worker/dist/collectives_nccl.h"
#endif

namespace qsync {
namespace {

// Prometheus telemetry of this rank (--metrics-port), with its plan; null without the flag.
std::unique_ptr<WorkerTelemetry> start_telemetry(const TrainConfig& c, const ModelDesc& desc, const RankPlan& plan,
                                                 const DeviceClass& device, const MemoryAccount& memory, int rank,
                                                 int64_t local_batch, TrainEvents& events) {
  if (c.metrics_port < 0) return nullptr;
  auto metrics = std::make_unique<WorkerTelemetry>(
      WorkerTelemetryConfig{c.metrics_address, c.metrics_port, c.job_name, rank, device.name});
  std::vector<std::pair<std::string, std::string>> layers;
  for (const LayerDesc* l : model_gemm_layers(desc))
    layers.emplace_back(l->name, layer_precision_name(plan.precision_of(l->name)));
  metrics->set_plan(layers, plan.predicted_step_seconds, local_batch);
  metrics->set_memory(memory.peak_bytes(), c.memory_budget);
  events.message("metrics on " + metrics->url());
  return metrics;
}

// --resume: the model, optimizer, loss scale and data position of the job's newest checkpoint
// (every rank loads the same step); the step to go on from, 0 where there is none.
int64_t resume_from_checkpoint(const TrainConfig& c, Model& model, Optimizer& opt, LossScaler& scaler,
                               TrainingData& data, Collectives& coll, TrainEvents& events, TerminationReport& report,
                               bool& resumed) {
  resumed = false;
  if (!c.resume) return 0;
  if (c.checkpoint_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
  const ResumePoint r =
      checkpoint_resume(c.checkpoint_dir, model, opt, coll, [&](const std::string& w) { events.message(w); });
  if (!r.found) {
    events.message("no checkpoint in " + c.checkpoint_dir + ": starting from scratch");
    return 0;
  }
  resumed = true;
  scaler.set_state(r.meta.loss_scale);
  data.set_position({r.meta.data_epoch, r.meta.data_index});
  report.checkpoint_step = r.meta.step;
  events.message("resumed from " + r.path + " at step " + std::to_string(r.meta.step));
  if (r.meta.version < 3 && !model.running_statistics().empty())
    events.message("checkpoint format version " + std::to_string(r.meta.version) +
                   " holds no running statistics: the BatchNorm layers restart from the model file's");
  return r.meta.step;
}

// A data-parallel rank's gradient sync (none alone): over NCCL in device buckets when every rank
// is a GPU, else over Gloo in host buckets.
struct GradientSyncs {
  std::unique_ptr<Collectives> nccl;  // NCCL when every rank is a GPU
  std::unique_ptr<GradientSync> sync;
};
GradientSyncs gradient_syncs(const TrainConfig& c, const JobDevices& job, World& joined, RankDevice& rank_device,
                             Model& model, TrainEvents& events) {
  GradientSyncs g;
  Collectives& coll = *joined.collectives;
  if (coll.world_size() == 1) return g;
#if defined(QSYNC_WITH_CUDA)
  if (job.all_cuda) g.nccl = std::make_unique<NcclCollectives>(*joined.rendezvous, rank_device.cuda_device());
#else
  (void)job;
#endif
  g.sync = gradient_sync_create(coll, g.nccl.get(), model, c.bucket_bytes);
  if (rank_device.is_cuda())
    events.message(std::string("gradients over ") + (g.nccl ? "NCCL (device buckets)" : "Gloo (pinned host buckets)"));
  return g;
}

// Rank 0's checkpoints of this run (weights and data position are the same on every rank), kept
// as --keep-checkpoints says; files of an earlier run past the first one it saves go.
struct RunCheckpoints {
  const TrainConfig& c;
  const ModelDesc& desc;
  Model& model;
  Optimizer& opt;
  const TrainingData& data;
  const LossScaler& scaler;
  TrainEvents& events;
  TerminationReport& report;
  int rank;
  bool resumed;
  int64_t own_from_step;  // the first step of this run's checkpoints (-1: its first save)

  void save(int64_t done) {
    if (c.checkpoint_dir.empty() || rank != 0) return;
    const LoaderPosition pos = data.position();
    if (own_from_step < 0) own_from_step = done;  // from scratch: older files are an earlier run's
    const CheckpointSaved saved =
        checkpoint_save_kept(c.checkpoint_dir, c.keep_checkpoints, model, opt,
                             {done, pos.epoch, pos.step, c.seed, desc.hash, scaler.state()}, own_from_step);
    for (const std::string& stale : saved.removed_stale)
      events.message("removed " + stale + ": not of this run (saved step " + std::to_string(done) + ", " +
                     (resumed ? "resumed before that file's step" : "started from scratch") + ")");
    report.checkpoint_step = done;
  }
};

// The summary's description of this rank: model, device, loss scaling, plan and its prediction.
void describe_rank(const TrainConfig& c, const ModelDesc& desc, const RankPlan& plan, const DeviceClass& device,
                   const RankDevice& rank_device, const Model& model, const LossScaler& scaler, TrainSummary& s) {
  s.model = desc.name;
  s.device_class = device.name;
  s.device = rank_device.describe();
  s.loss_scaling = loss_scaling_name(scaler.enabled() ? LossScaling::DYNAMIC : LossScaling::NONE);
  s.parameter_count = model.parameter_count();
  s.plan_summary = plan_summary(plan, desc);
  predict_rank(c, desc, plan, device, s.local_batch, s);
}

// While it lives, a SIGINT or SIGTERM is a stop request for the step loop (stop_signal_watcher.h).
class StopArmed {
 public:
  explicit StopArmed(StopSignalWatcher& w) : w_(w) { w_.set_armed(true); }
  ~StopArmed() { w_.set_armed(false); }
  StopArmed(const StopArmed&) = delete;
  StopArmed& operator=(const StopArmed&) = delete;

 private:
  StopSignalWatcher& w_;
};

// The training run behind train_run; `report` follows it (steps done, last checkpoint) so that
// train_run can write the termination log even when this throws.
TrainSummary train_run_reporting(const TrainConfig& c, TerminationReport& report) {
  const auto wall0 = std::chrono::steady_clock::now();
  StopSignalWatcher stop;  // before any thread starts: they all inherit the blocked SIGINT/SIGTERM
  const ModelDesc desc = model_desc_find(c.model);
  const DeviceClass& device = c.device_class.empty() ? device_class_fallback(device_class_by_name("cpu-amx"))
                                                     : device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);
  if (c.batch <= 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(c.batch));
  const RankPlan plan = load_plan(c, desc);
  RankDevice rank_device(device);  // the host, or this rank's GPU (LOCAL_RANK)
  DeviceOps& ops = rank_device.ops();

  // The world: a rendezvous and Gloo collectives when there is more than one rank.
  World joined = world_join(rendezvous_for(c), GlooLoopPolicy::kSchedIdle);  // steps of ms, few collectives
  std::unique_ptr<Collectives>& coll = joined.collectives;
  coll = collectives_with_link(std::move(coll), c.link);  // unchanged when no --link is given
  const int rank = coll->rank(), world = coll->world_size();
  check_plan_runs_on(plan, desc, device, rank);
  const std::vector<int64_t> batches = local_batches(c, plan, *coll);

  TrainSummary s;
  s.rank = rank;
  s.world_size = world;
  s.local_batch = batches[size_t(rank)];
  for (int64_t b : batches) s.global_batch += b;
  MemoryAccount memory(c.memory_budget, "rank " + std::to_string(rank));
  Model model(desc, &memory, c.seed, &ops);  // the same seed: the same weights on every rank
  model.apply_plan(plan);
  auto data = TrainingData::open(desc, c.data, BatchSharding(batches, rank), c.seed, c.eval_limit);
  const int64_t total_steps =
      c.steps > 0 ? c.steps : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * double(data->steps_per_epoch()))));
  OptimizerConfig oc = c.optimizer;
  if (oc.total_steps == 0) oc.total_steps = total_steps;
  Optimizer opt(oc, model.parameters(), &memory, &ops);
  // What the ranks must agree on about their devices: NCCL when all are GPUs; loss scaling when
  // any GPU rank runs a backward in FP16 (every rank scales alike: the sums stay consistent).
  const bool fp16_backward = plan_has_fp16_backward(plan, desc, device);
  const JobDevices job = world > 1 ? job_devices_agree(*coll, rank_device.is_cuda(), fp16_backward)
                                   : JobDevices{rank_device.is_cuda(), fp16_backward};
  LossScaler scaler(loss_scaling_resolve(c.loss_scaling, job.loss_scaling));

  describe_rank(c, desc, plan, device, rank_device, model, scaler, s);
  TrainEvents events(c, rank, world, total_steps);
  events.start(desc, device, data->describe(), s);
  if (c.link.enabled())
    events.message("link emulation: " + c.link.describe() + " on every collective (" + coll->backend() + ")" +
                   (world == 1 ? "; a single rank has nothing to emulate" : ""));
  std::unique_ptr<WorkerTelemetry> metrics =
      start_telemetry(c, desc, plan, device, memory, rank, s.local_batch, events);

  bool resumed = false;
  s.start_step = resume_from_checkpoint(c, model, opt, scaler, *data, *coll, events, report, resumed);
  report.steps = s.start_step;
  const std::string& ckpt_dir = c.checkpoint_dir;
  if (!ckpt_dir.empty() && rank == 0) std::filesystem::create_directories(ckpt_dir);
  if (world > 1) {
    check_settings_agree(c, desc, total_steps, s.global_batch, *coll);
    check_weights_agree(model, *coll, s.start_step);
  }

  StepContext ctx;
  ctx.ops = &ops;
  ctx.memory = &memory;
  ctx.seed = c.seed;
  set_sixteen_bit_for(device, ctx);
  const GradientSyncs syncs = gradient_syncs(c, job, joined, rank_device, model, events);
  ctx.backward_listener = syncs.sync.get();
  RunCheckpoints checkpoints{c, desc, model, opt, *data, scaler, events, report, rank, resumed, resumed ? 0 : -1};
  const auto save = [&checkpoints](int64_t done) { checkpoints.save(done); };

  std::optional<StopArmed> armed(std::in_place, stop);  // until the loop ends, by a throw too

  const float loss_divisor = float(double(s.global_batch) * double(data->positions_per_sample()));  // global mean
  RankStep step_runner(model, opt, syncs.sync.get(), scaler, batch_shape(desc, s.local_batch),
                       s.local_batch * data->positions_per_sample(), &memory, world > 1 ? coll.get() : nullptr);
  OpTimeTable op_table;
  StepLoop loop{c,    desc,   model,         *data,    step_runner, ctx,  *coll,       memory,
                stop, events, metrics.get(), op_table, report,      save, total_steps, loss_divisor};
  StepSeries series;
  const int64_t step = run_steps(loop, s, series);
  armed.reset();
  save(step);
  s.steps = step;
  s.peak_memory_bytes = memory.peak_bytes();
  s.device_peak_bytes = rank_device.device_peak_bytes();
  s.final_loss_scale = scaler.enabled() ? scaler.state().scale : 0.0;
  s.weight_hash = model.weight_hash();
  if (c.op_times) report_op_times(op_table, s, events);
  final_evaluation(loop, s, step);
  series.summarize(s);
  s.wall_seconds = seconds_since(wall0);
  events.done(s);
  if (!c.summary_json.empty()) train_summary_write_json(s, c.summary_json);
  return s;
}

}  // namespace

std::string termination_report_json(const TerminationReport& r) {
  constexpr size_t limit = 4096 - 2;  // the line and its newline stay under Kubernetes' 4096 bytes
  std::string error = r.error;
  for (;;) {
    nlohmann::json j = {{"steps", r.steps}, {"checkpointStep", r.checkpoint_step}, {"stoppedEarly", r.stopped_early}};
    if (!r.error.empty()) j["error"] = error;
    // replace: a cut through a multi-byte character must not make the dump throw
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (line.size() <= limit || error.empty()) return line;
    const size_t over = line.size() - limit;  // escaping can make the cut short: loop until it fits
    error = error.substr(0, error.size() > over + 3 ? error.size() - over - 3 : 0) + "...";
  }
}

void termination_report_write(const TerminationReport& r, const std::string& path) {
  const std::string line = termination_report_json(r) + "\n";
  try {
    atomic_file_write(path, line);
    return;
  } catch (const std::runtime_error&) {
    // No temp file beside it (a read-only /dev) or no rename onto it (a bind-mounted file).
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << line;
  out.flush();
  if (!out)
    throw std::runtime_error("cannot write the termination log '" + path +
                             "': --termination-log must name a writable file in an existing directory");
}

TrainSummary train_run(const TrainConfig& c) {
  TerminationReport report;
  TrainSummary s;
  try {
    s = train_run_reporting(c, report);
  } catch (const std::exception& e) {
    if (!c.termination_log.empty()) {
      report.error = e.what();
      try {
        termination_report_write(report, c.termination_log);
      } catch (const std::exception& write_error) {
        std::fprintf(stderr, "qsync-worker: %s\n", write_error.what());  // the training error matters more
      }
    }
    throw;
  }
  if (!c.termination_log.empty()) termination_report_write(report, c.termination_log);
  return s;
}

}  // namespace qsync
