// File: worker/trainer.cpp
// The training loop of one rank: single-process, or one rank of a synchronous data-parallel job
// (gradients all-reduced in buckets during backward, FP32 master weights identical everywhere).
#include "worker/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "planner/median.h"
#include "worker/checkpoint_resume.h"
#include "worker/checkpoint_store.h"
#include "worker/dist/collectives.h"
#include "worker/dist/link_model.h"
#include "worker/loss.h"
#include "worker/model.h"
#include "worker/precision_ops.h"
#include "worker/op_time_table.h"
#include "worker/telemetry.h"
#include "worker/progress.h"
#include "worker/stop_signal_watcher.h"
#include "worker/ops/rank_device.h"
#include "worker/train_data.h"
#include "worker/train_events.h"
#include "worker/train_setup.h"
#include "worker/train_step.h"
#if defined(QSYNC_WITH_CUDA)
#include "worker/dist/collectives_nccl.h"
#endif

namespace qsync {
namespace {

// Minor page faults of this process so far (every thread).
int64_t minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_minflt);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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
  const RendezvousConfig rc = rendezvous_for(c);
  World joined = world_join(rc, GlooLoopPolicy::kSchedIdle);  // steps of ms, few collectives
  std::unique_ptr<Collectives>& coll = joined.collectives;
  coll = collectives_with_link(std::move(coll), c.link);  // unchanged when no --link is given
  const int rank = coll->rank(), world = coll->world_size();
  check_plan_runs_on(plan, desc, device, rank);
  const std::vector<int64_t> batches = local_batches(c, plan, *coll);
  const int64_t local_batch = batches[size_t(rank)];
  int64_t global_batch = 0;
  for (int64_t b : batches) global_batch += b;

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
  const JobDevices job = world > 1 ? job_devices_agree(*coll, rank_device.is_cuda(), plan_has_fp16_backward(plan, desc, device))
                                   : JobDevices{rank_device.is_cuda(), plan_has_fp16_backward(plan, desc, device)};
  LossScaler scaler(loss_scaling_resolve(c.loss_scaling, job.loss_scaling));

  TrainSummary s;
  s.model = desc.name;
  s.device_class = device.name;
  s.device = rank_device.describe();
  s.loss_scaling = loss_scaling_name(scaler.enabled() ? LossScaling::DYNAMIC : LossScaling::NONE);
  s.rank = rank;
  s.world_size = world;
  s.local_batch = local_batch;
  s.global_batch = global_batch;
  s.parameter_count = model.parameter_count();
  s.plan_summary = plan_summary(plan, desc);
  predict_rank(c, desc, plan, device, local_batch, s);
  TrainEvents events(c, rank, world, total_steps);
  events.start(desc, device, data->describe(), s);
  if (c.link.enabled()) {
    events.message("link emulation: " + c.link.describe() + " on every collective (" + coll->backend() + ")" +
                   (world == 1 ? "; a single rank has nothing to emulate" : ""));
  }
  std::unique_ptr<WorkerTelemetry> metrics;
  if (c.metrics_port >= 0) {
    metrics = std::make_unique<WorkerTelemetry>(
        WorkerTelemetryConfig{c.metrics_address, c.metrics_port, c.job_name, rank, device.name});
    std::vector<std::pair<std::string, std::string>> layers;
    for (const LayerDesc* l : model_gemm_layers(desc))
      layers.emplace_back(l->name, layer_precision_name(plan.precision_of(l->name)));
    metrics->set_plan(layers, plan.predicted_step_seconds, local_batch);
    metrics->set_memory(memory.peak_bytes(), c.memory_budget);
    events.message("metrics on " + metrics->url());
  }

  int64_t step = 0;
  bool resumed = false;
  const std::string& ckpt_dir = c.checkpoint_dir;
  if (c.resume) {
    if (ckpt_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
    const ResumePoint r = checkpoint_resume(ckpt_dir, model, opt, *coll, [&](const std::string& w) { events.message(w); });
    if (r.found) {
      resumed = true;
      step = r.meta.step;
      scaler.set_state(r.meta.loss_scale);
      data->set_position({r.meta.data_epoch, r.meta.data_index});
      report.checkpoint_step = step;
      events.message("resumed from " + r.path + " at step " + std::to_string(step));
      if (r.meta.version < 3 && !model.running_statistics().empty())
        events.message("checkpoint format version " + std::to_string(r.meta.version) +
                       " holds no running statistics: the BatchNorm layers restart from the model file's");
    } else {
      events.message("no checkpoint in " + ckpt_dir + ": starting from scratch");
    }
  }
  s.start_step = step;
  report.steps = step;
  if (!ckpt_dir.empty() && rank == 0) std::filesystem::create_directories(ckpt_dir);
  if (world > 1) {
    check_settings_agree(c, desc, total_steps, global_batch, *coll);
    check_weights_agree(model, *coll, step);
  }

  OpTimeTable op_table;
  StepContext ctx;
  ctx.ops = &ops;
  ctx.memory = &memory;
  ctx.seed = c.seed;
  set_sixteen_bit_for(device, ctx);
  std::unique_ptr<Collectives> nccl;
  std::unique_ptr<GradientSync> sync;
  if (world > 1) {
#if defined(QSYNC_WITH_CUDA)
    if (job.all_cuda) nccl = std::make_unique<NcclCollectives>(*joined.rendezvous, rank_device.cuda_device());
#endif
    sync = gradient_sync_create(*coll, nccl.get(), model, c.bucket_bytes);
    ctx.backward_listener = sync.get();
    if (rank_device.is_cuda())
      events.message(std::string("gradients over ") + (nccl ? "NCCL (device buckets)" : "Gloo (pinned host buckets)"));
  }
  int64_t own_from_step = resumed ? 0 : -1;  // the first step of this run's checkpoints (-1: its first save)
  auto save = [&](int64_t done) {
    if (ckpt_dir.empty() || rank != 0) return;  // weights and data position are the same on every rank
    const LoaderPosition pos = data->position();
    if (own_from_step < 0) own_from_step = done;  // from scratch: older files are an earlier run's
    const CheckpointSaved saved = checkpoint_save_kept(ckpt_dir, c.keep_checkpoints, model, opt,
                                                       {done, pos.epoch, pos.step, c.seed, desc.hash, scaler.state()},
                                                       own_from_step);
    for (const std::string& stale : saved.removed_stale)
      events.message("removed " + stale + ": not of this run (saved step " + std::to_string(done) + ", " +
                     (resumed ? "resumed before that file's step" : "started from scratch") + ")");
    report.checkpoint_step = done;
  };
  stop.set_armed(true);

  const double positions_per_sample = double(data->positions_per_sample());
  const float loss_divisor = float(double(global_batch) * positions_per_sample);  // global mean
  RankStep step_runner(model, opt, sync.get(), scaler, batch_shape(desc, local_batch),
                       local_batch * data->positions_per_sample(), &memory, world > 1 ? coll.get() : nullptr);
  std::vector<double> step_seconds, compute_seconds, wait_seconds, allreduce_seconds, optimizer_seconds, stats_seconds;
  int64_t skipped_steps = 0;
  std::vector<int64_t> step_faults;  // minor page faults of each step (the step itself and its stats)
  try {
    for (; step < total_steps; ++step) {
      const int64_t faults_before = minor_page_faults();
      data->next(step_runner.host_batch(), step_runner.host_targets());
      const auto t0 = std::chrono::steady_clock::now();
      ctx.step = step;
      ctx.training = true;
      // --op-times: training steps after this run's first (it creates oneDNN's primitives).
      ctx.timer = c.op_times && step > s.start_step ? &op_table : nullptr;
      const StepOutcome out = step_runner.run(ctx, loss_divisor);
      skipped_steps += out.skipped ? 1 : 0;
      const auto t_stats = std::chrono::steady_clock::now();
      optimizer_seconds.push_back(out.optimizer_seconds);
      // One small all-reduce: the global loss and accuracy, and whether any rank was asked to stop.
      const double positions = double(step_runner.host_targets().size());
      double stats[4] = {out.loss_sum, double(out.correct), positions, stop.requested() ? 1.0 : 0.0};
      coll->all_reduce_sum(stats, 4);
      stats_seconds.push_back(seconds_since(t_stats));
      step_seconds.push_back(seconds_since(t0));
      step_faults.push_back(minor_page_faults() - faults_before);
      // A step that faulted moved the heap's high-water mark: touch the headroom past it again
      // (between steps; where nothing moved the pages are touched already and this costs ~0.1 ms).
      if (step_faults.back() > 0) host_heap_prefault(HOST_HEAP_HEADROOM_BYTES);
      const double compute = out.compute_seconds;
      compute_seconds.push_back(compute);
      wait_seconds.push_back(out.wait_seconds);
      allreduce_seconds.push_back(out.allreduce_seconds);
      const double loss = stats[0] / stats[2];
      s.losses.push_back(loss);
      s.final_train_loss = loss;
      report.steps = step + 1;
      events.step(step + 1, loss, stats[1] / stats[2], step_seconds.back(), compute, wait_seconds.back(),
                  allreduce_seconds.back(), double(global_batch));
      if (metrics) {
        metrics->record_step(step_seconds.back(), compute, wait_seconds.back(), allreduce_seconds.back(), loss, local_batch);
        metrics->set_memory(memory.peak_bytes(), c.memory_budget);
      }
      if (c.weight_hash_every > 0 && world > 1 && (step + 1) % c.weight_hash_every == 0)
        check_weights_agree(model, *coll, step + 1);
      if (rank == 0 && c.eval_every > 0 && (step + 1) % c.eval_every == 0 && step + 1 < total_steps) {
        ctx.timer = nullptr;  // the op times are the training steps'
        const EvalResult e = evaluate(model, *data, ctx, step_runner);
        events.eval(step + 1, e);
      }
      if (c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) save(step + 1);
      if (stats[3] > 0) {
        s.stopped_early = true;
        report.stopped_early = true;
        ++step;
        events.message("stop requested: checkpointing at step " + std::to_string(step) + " and exiting");
        break;
      }
    }
  } catch (...) {
    stop.set_armed(false);
    throw;
  }
  stop.set_armed(false);
  save(step);
  s.steps = step;
  s.peak_memory_bytes = memory.peak_bytes();
  if (!step_faults.empty()) s.first_step_minor_page_faults = step_faults.front();
  if (int64_t(step_faults.size()) > STEADY_STATE_WARMUP_STEPS) {
    int64_t faults = 0;
    s.steady_steps_with_page_faults = 0;
    for (size_t i = STEADY_STATE_WARMUP_STEPS; i < step_faults.size(); ++i) {
      faults += step_faults[i];
      s.steady_steps_with_page_faults += step_faults[i] > 0 ? 1 : 0;
    }
    s.steady_minor_page_faults_per_step = double(faults) / double(step_faults.size() - STEADY_STATE_WARMUP_STEPS);
  }
  s.device_peak_bytes = rank_device.device_peak_bytes();
  s.skipped_steps = skipped_steps;
  s.final_loss_scale = scaler.enabled() ? scaler.state().scale : 0.0;
  s.weight_hash = model.weight_hash();
  if (c.op_times) {
    s.op_time_steps = std::max<int64_t>(0, s.steps - s.start_step - 1);
    for (const auto& [op, t] : op_table.totals())
      s.op_times[op] = {t.first / double(s.op_time_steps), double(t.second) / double(s.op_time_steps)};
    events.message("time per op (the " + std::to_string(s.op_time_steps) +
                   " training steps of this run after its first, evaluations excluded):\n" +
                   op_table.format(s.op_time_steps));
  }

  ctx.timer = nullptr;
  if (rank == 0 && !s.stopped_early) {
    const EvalResult e = evaluate(model, *data, ctx, step_runner);
    s.final_test_loss = e.loss;
    s.final_test_accuracy = e.accuracy;
    s.final_perplexity = desc.task == ModelTask::LANGUAGE_MODEL ? std::exp(e.loss) : 0.0;
    if (metrics) metrics->set_test_accuracy(e.accuracy);
    if (c.eval_every > 0) events.eval(step, e);  // the curve's last point
  }
  s.median_step_seconds = median_of(step_seconds);
  s.median_compute_seconds = median_of(compute_seconds);
  s.median_wait_seconds = median_of(wait_seconds);
  s.median_optimizer_seconds = median_of(optimizer_seconds);
  s.median_stats_seconds = median_of(stats_seconds);
  s.median_allreduce_seconds = median_of(allreduce_seconds);
  s.samples_per_second = s.median_step_seconds > 0 ? double(global_batch) / s.median_step_seconds : 0;
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
