// File: worker/train_loop.cpp
// The step loop of a training rank (see train_loop.h).
#include "worker/train_loop.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "planner/median.h"
#include "worker/tensor.h"
#include "worker/train_setup.h"

namespace qsync {
namespace {

// Minor page faults of this process so far (every thread).
int64_t minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_minflt);
}

}  // namespace

void StepSeries::summarize(TrainSummary& s) const {
  if (!faults.empty()) s.first_step_minor_page_faults = faults.front();
  if (int64_t(faults.size()) > STEADY_STATE_WARMUP_STEPS) {
    int64_t total = 0;
    s.steady_steps_with_page_faults = 0;
    for (size_t i = STEADY_STATE_WARMUP_STEPS; i < faults.size(); ++i) {
      total += faults[i];
      s.steady_steps_with_page_faults += faults[i] > 0 ? 1 : 0;
    }
    s.steady_minor_page_faults_per_step = double(total) / double(faults.size() - STEADY_STATE_WARMUP_STEPS);
  }
  s.median_step_seconds = median_of(step);
  s.median_compute_seconds = median_of(compute);
  s.median_wait_seconds = median_of(wait);
  s.median_optimizer_seconds = median_of(optimizer);
  s.median_stats_seconds = median_of(stats);
  s.median_allreduce_seconds = median_of(allreduce);
  s.samples_per_second = s.median_step_seconds > 0 ? double(s.global_batch) / s.median_step_seconds : 0;
}

void report_op_times(const OpTimeTable& table, TrainSummary& s, TrainEvents& events) {
  s.op_time_steps = std::max<int64_t>(0, s.steps - s.start_step - 1);
  for (const auto& [op, t] : table.totals())
    s.op_times[op] = {t.first / double(s.op_time_steps), double(t.second) / double(s.op_time_steps)};
  events.message("time per op (the " + std::to_string(s.op_time_steps) +
                 " training steps of this run after its first, evaluations excluded):\n" +
                 table.format(s.op_time_steps));
}

int64_t run_steps(StepLoop& l, TrainSummary& s, StepSeries& series) {
  const TrainConfig& c = l.c;
  const int rank = l.coll.rank(), world = l.coll.world_size();
  int64_t step = s.start_step;
  for (; step < l.total_steps; ++step) {
    const int64_t faults_before = minor_page_faults();
    l.data.next(l.runner.host_batch(), l.runner.host_targets());
    const auto t0 = std::chrono::steady_clock::now();
    l.ctx.step = step;
    l.ctx.training = true;
    // --op-times: training steps after this run's first (it creates oneDNN's primitives).
    l.ctx.timer = c.op_times && step > s.start_step ? &l.op_table : nullptr;
    const StepOutcome out = l.runner.run(l.ctx, l.loss_divisor);
    s.skipped_steps += out.skipped ? 1 : 0;
    const auto t_stats = std::chrono::steady_clock::now();
    series.optimizer.push_back(out.optimizer_seconds);
    // One small all-reduce: the global loss and accuracy, and whether any rank was asked to stop.
    const double positions = double(l.runner.host_targets().size());
    double stats[4] = {out.loss_sum, double(out.correct), positions, l.stop.requested() ? 1.0 : 0.0};
    l.coll.all_reduce_sum(stats, 4);
    series.stats.push_back(seconds_since(t_stats));
    series.step.push_back(seconds_since(t0));
    series.faults.push_back(minor_page_faults() - faults_before);
    // A step that faulted moved the heap's high-water mark: touch the headroom past it again
    // (between steps; where nothing moved the pages are touched already and this costs ~0.1 ms).
    if (series.faults.back() > 0) host_heap_prefault(HOST_HEAP_HEADROOM_BYTES);
    series.compute.push_back(out.compute_seconds);
    series.wait.push_back(out.wait_seconds);
    series.allreduce.push_back(out.allreduce_seconds);
    const double loss = stats[0] / stats[2];
    s.losses.push_back(loss);
    s.final_train_loss = loss;
    l.report.steps = step + 1;
    l.events.step(step + 1, loss, stats[1] / stats[2], series.step.back(), out.compute_seconds, out.wait_seconds,
                  out.allreduce_seconds, double(s.global_batch));
    if (l.metrics) {
      l.metrics->record_step(series.step.back(), out.compute_seconds, out.wait_seconds, out.allreduce_seconds, loss,
                             s.local_batch);
      l.metrics->set_memory(l.memory.peak_bytes(), c.memory_budget);
    }
    if (c.weight_hash_every > 0 && world > 1 && (step + 1) % c.weight_hash_every == 0)
      check_weights_agree(l.model, l.coll, step + 1);
    if (rank == 0 && c.eval_every > 0 && (step + 1) % c.eval_every == 0 && step + 1 < l.total_steps) {
      l.ctx.timer = nullptr;  // the op times are the training steps'
      l.events.eval(step + 1, evaluate(l.model, l.data, l.ctx, l.runner));
    }
    if (c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) l.save(step + 1);
    if (stats[3] > 0) {
      s.stopped_early = true;
      l.report.stopped_early = true;
      ++step;
      l.events.message("stop requested: checkpointing at step " + std::to_string(step) + " and exiting");
      break;
    }
  }
  l.ctx.timer = nullptr;
  return step;
}

void final_evaluation(StepLoop& l, TrainSummary& s, int64_t step) {
  if (l.coll.rank() != 0 || s.stopped_early) return;
  const EvalResult e = evaluate(l.model, l.data, l.ctx, l.runner);
  s.final_test_loss = e.loss;
  s.final_test_accuracy = e.accuracy;
  s.final_perplexity = l.desc.task == ModelTask::LANGUAGE_MODEL ? std::exp(e.loss) : 0.0;
  if (l.metrics) l.metrics->set_test_accuracy(e.accuracy);
  if (l.c.eval_every > 0) l.events.eval(step, e);  // the curve's last point
}

}  // namespace qsync
