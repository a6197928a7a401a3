// File: worker/trainer.cpp
// The training loop.
#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "worker/checkpoint.h"
#include "worker/loss.h"
#include "worker/model.h"
#include "worker/op_time_table.h"
#include "worker/progress.h"
#include "worker/train_data.h"

namespace qsync {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Shape batch_shape(const ModelDesc& m, int64_t batch) {
  Shape s = m.input_shape;
  s.insert(s.begin(), batch);
  return s;
}

// The device's 16-bit format for INT8 backward GEMMs: BF16 where the class computes it natively,
// FP16 on CUDA, else FP16 numerics emulated in FP32 GEMMs.
void set_sixteen_bit(const DeviceClass& c, StepContext& ctx) {
  for (const PrecisionCapability& p : device_class_capabilities(c))
    if (p.precision == Precision::BF16 && p.level == SupportLevel::NATIVE) {
      ctx.sixteen_bit = Precision::BF16;
      ctx.sixteen_bit_native = true;
      return;
    }
  ctx.sixteen_bit = Precision::FP16;
  ctx.sixteen_bit_native = c.kind == DeviceKind::CUDA;
}

RankPlan load_plan(const TrainConfig& c, const ModelDesc& m) {
  if (!c.plan_path.empty()) {
    if (!c.precision.empty())
      throw std::invalid_argument("pass either --plan or --precision, not both");
    return plan_file_load(c.plan_path, m);
  }
  return plan_uniform(m, c.precision.empty() ? LayerPrecision::FP32 : layer_precision_from_name(c.precision));
}

std::string plan_summary(const RankPlan& plan, const ModelDesc& m) {
  std::string s;
  for (const LayerDesc* l : model_gemm_layers(m))
    s += (s.empty() ? "" : " ") + l->name + "=" + layer_precision_name(plan.precision_of(l->name));
  return s;
}

}  // namespace

static EvalResult evaluate(Model& model, const TrainingData& data, StepContext ctx) {
  ctx.training = false;
  EvalResult r;
  double loss_sum = 0, correct = 0, positions = 0;
  std::vector<int32_t> targets;
  for (int64_t i = 0; i < data.eval_batches(); ++i) {
    const int64_t b = data.eval_batch_size(i);
    Tensor x = Tensor::empty(batch_shape(model.desc(), b), Precision::FP32, ctx.memory, "eval batch");
    data.eval_batch(i, x, targets);
    const Tensor logits = model.forward(x, ctx);
    const SoftmaxXentResult res = softmax_cross_entropy(logits, targets, 1.0f, ctx.memory);
    loss_sum += res.loss_sum;
    correct += double(res.correct);
    positions += double(targets.size());
    r.samples += b;
  }
  r.loss = positions > 0 ? loss_sum / positions : 0;
  r.accuracy = positions > 0 ? correct / positions : 0;
  return r;
}

TrainSummary train_run(const TrainConfig& c) {
  const auto wall0 = std::chrono::steady_clock::now();
  const ModelDesc desc = model_desc_find(c.model);
  const DeviceClass& device = c.device_class.empty() ? device_class_fallback(device_class_by_name("cpu-amx"))
                                                     : device_class_by_name(c.device_class);
  device_class_activate(device, c.threads);
  if (c.batch <= 0) throw std::invalid_argument("--batch must be positive, got " + std::to_string(c.batch));
  const RankPlan plan = load_plan(c, desc);

  MemoryAccount memory(c.memory_budget, "rank 0");
  Model model(desc, &memory, c.seed);
  model.apply_plan(plan);
  auto data = TrainingData::open(desc, c.data, BatchSharding::single(c.batch), c.seed, c.eval_limit);

  const int64_t total_steps =
      c.steps > 0 ? c.steps : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * double(data->steps_per_epoch()))));
  OptimizerConfig oc = c.optimizer;
  if (oc.total_steps == 0) oc.total_steps = total_steps;
  Optimizer opt(oc, model.parameters(), &memory);

  TrainSummary s;
  s.model = desc.name;
  s.device_class = device.name;
  s.parameter_count = model.parameter_count();
  s.plan_summary = plan_summary(plan, desc);
  ProgressReporter progress(!c.quiet && stdout_is_tty(), c.log_every);
  if (!c.quiet) {
    progress.message("qsync-worker: " + desc.name + " (" + std::to_string(s.parameter_count) + " parameters) on " +
                     device.name + ", " + std::to_string(c.threads) + " thread(s); " + data->describe());
    progress.message("plan: " + s.plan_summary);
  }

  int64_t step = 0;
  const std::string ckpt = c.checkpoint_dir.empty() ? "" : checkpoint_path(c.checkpoint_dir);
  if (c.resume) {
    if (ckpt.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
    if (std::filesystem::exists(ckpt)) {
      const CheckpointMeta meta = checkpoint_load(ckpt, model, opt);
      step = meta.step;
      data->set_position({meta.data_epoch, meta.data_index});
      if (!c.quiet) progress.message("resumed from " + ckpt + " at step " + std::to_string(step));
    } else if (!c.quiet) {
      progress.message("no checkpoint at " + ckpt + ": starting from scratch");
    }
  }
  s.start_step = step;
  if (!c.checkpoint_dir.empty()) std::filesystem::create_directories(c.checkpoint_dir);

  OpTimeTable op_table;
  StepContext ctx;
  ctx.memory = &memory;
  if (c.op_times) ctx.timer = &op_table;
  ctx.seed = c.seed;
  set_sixteen_bit(device, ctx);
  auto save = [&](int64_t done) {
    const LoaderPosition pos = data->position();
    checkpoint_save(ckpt, model, opt, {done, pos.epoch, pos.step, c.seed, desc.hash});
  };

  Tensor x = Tensor::empty(batch_shape(desc, c.batch), Precision::FP32, &memory, "input batch");
  std::vector<int32_t> targets;
  std::vector<double> step_seconds;
  double correct_window = 0, positions_window = 0;
  for (; step < total_steps; ++step) {
    data->next(x, targets);
    const auto t0 = std::chrono::steady_clock::now();
    ctx.step = step;
    ctx.training = true;
    model.zero_grad();
    const Tensor logits = model.forward(x, ctx);
    const SoftmaxXentResult res =
        softmax_cross_entropy(logits, targets, float(targets.size()), &memory);
    model.backward(res.dlogits, ctx);
    opt.step(step);
    step_seconds.push_back(seconds_since(t0));
    s.losses.push_back(res.loss);
    s.final_train_loss = res.loss;
    correct_window += double(res.correct);
    positions_window += double(targets.size());
    const double elapsed = std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0);
    const double sps = double(c.batch) * double(step_seconds.size()) / elapsed;
    if (!c.quiet)
      progress.step(step + 1, total_steps, res.loss, correct_window / positions_window, sps,
                    elapsed / double(step_seconds.size()) * double(total_steps - step - 1));
    if ((step + 1) % std::max<int64_t>(1, c.log_every) == 0) correct_window = positions_window = 0;
    if (c.eval_every > 0 && (step + 1) % c.eval_every == 0 && step + 1 < total_steps && !c.quiet) {
      const EvalResult e = evaluate(model, *data, ctx);
      progress.message("eval at step " + std::to_string(step + 1) + ": loss " + std::to_string(e.loss) +
                       ", accuracy " + std::to_string(e.accuracy * 100.0) + "%");
    }
    if (!ckpt.empty() && c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) save(step + 1);
  }
  if (!ckpt.empty()) save(step);
  s.steps = step;
  s.peak_memory_bytes = memory.peak_bytes();

  if (c.op_times) progress.message("time per op (training steps of this run):\n" + op_table.format(s.steps - s.start_step));
  ctx.timer = nullptr;
  const EvalResult e = evaluate(model, *data, ctx);
  s.final_test_loss = e.loss;
  s.final_test_accuracy = e.accuracy;
  s.final_perplexity = desc.task == ModelTask::LANGUAGE_MODEL ? std::exp(e.loss) : 0.0;
  if (!step_seconds.empty()) {
    std::vector<double> sorted = step_seconds;
    std::sort(sorted.begin(), sorted.end());
    s.median_step_seconds = sorted[sorted.size() / 2];
    s.samples_per_second = double(c.batch) / s.median_step_seconds;
  }
  s.wall_seconds = seconds_since(wall0);
  if (!c.quiet) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "done: %lld steps, train loss %.4f, test loss %.4f, test accuracy %.2f%%, median step %.1f ms, "
                  "%.0f samples/s, peak memory %s",
                  (long long)s.steps, s.final_train_loss, s.final_test_loss, s.final_test_accuracy * 100.0,
                  s.median_step_seconds * 1e3, s.samples_per_second, format_mib(s.peak_memory_bytes).c_str());
    progress.message(buf);
  }
  if (!c.summary_json.empty()) train_summary_write_json(s, c.summary_json);
  return s;
}

void train_summary_write_json(const TrainSummary& s, const std::string& path) {
  nlohmann::json j = {
      {"model", s.model},
      {"device_class", s.device_class},
      {"steps", s.steps},
      {"start_step", s.start_step},
      {"final_train_loss", s.final_train_loss},
      {"final_test_loss", s.final_test_loss},
      {"final_test_accuracy", s.final_test_accuracy},
      {"final_perplexity", s.final_perplexity},
      {"samples_per_second", s.samples_per_second},
      {"median_step_seconds", s.median_step_seconds},
      {"wall_seconds", s.wall_seconds},
      {"peak_memory_bytes", s.peak_memory_bytes},
      {"parameter_count", s.parameter_count},
      {"plan", s.plan_summary},
      {"losses", s.losses},
  };
  atomic_file_write(path, j.dump(2) + "\n");
}

}  // namespace qsync
