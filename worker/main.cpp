// File: worker/main.cpp
// qsync-worker: the training worker binary.
//
//   qsync-worker train --model FILE|NAME --data DIR|FILE [--plan FILE | --precision P]
//                      [--steps N | --epochs E] [--batch B] [--lr X] [--optimizer adamw|sgd]
//                      [--weight-decay X] [--warmup N] [--lr-schedule cosine|constant]
//                      [--grad-clip X] [--seed S]
//                      [--eval-every K] [--eval-limit N] [--checkpoint-dir D] [--checkpoint-every K]
//                      [--keep-checkpoints K] [--resume] [--summary-json FILE] [--device-class C] [--threads N]
//                      [--memory-budget MiB] [--log-every N] [--quiet] [--op-times]
//                      [--metrics-port N] [--job-name S] [--log-json]
//                      [--rank R] [--world-size N] [--master-addr A] [--master-port P]
//                      [--bucket-mib X] [--weight-hash-every N] [--collective-timeout SECONDS]
//   qsync-worker calibrate --model FILE|NAME [--data DIR] [--steps N] [--batch B] --out FILE
//   qsync-worker profile --model FILE|NAME --device-class C --batch B --out FILE [--threads N]
//                        [--data DIR] [--steps S]
//   qsync-worker infer --model FILE|NAME --checkpoint FILE|DIR [...]   (worker/tp/infer.h)
//   qsync-worker spd-plan --model FILE|NAME --checkpoint C --tp N --data TEXT --out PLAN [...]
//                        (worker/tp/spd_plan_command.h)
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "planner/worker_command.h"
#include "worker/calibration.h"
#include "worker/dist/collectives.h"
#include "worker/profiler.h"
#include "planner/cli_args.h"
#include "worker/device_report.h"
#include "worker/trainer.h"
#include "worker/tp/infer.h"
#include "worker/tp/spd_plan_command.h"

namespace qsync {
namespace {

const char* USAGE =
    "usage: qsync-worker train --model FILE|NAME (a model YAML, an .onnx file, or a zoo name) [--data DIR|FILE]\n"
    "         [--plan FILE | --precision P]\n"
    "         [--steps N | --epochs E] [--batch B] [--lr X] [--optimizer adamw|sgd] [--weight-decay X]\n"
    "         [--warmup N] [--lr-schedule cosine|constant] [--grad-clip X] [--seed S]\n"
    "         [--eval-every K] [--eval-limit N]\n"
    "         [--checkpoint-dir D] [--checkpoint-every K] [--keep-checkpoints K (default 2)] [--resume]\n"
    "         [--summary-json FILE]\n"
    "         [--device-class cpu-amx|cpu-avx512-bf16|cpu-avx512|cpu-avx2|cpu-sse41|gpu-t4|gpu-a10|gpu-l4|gpu-a100|gpu-h100|gpu-h200]\n"
    "         [--threads N] [--memory-budget MiB] [--loss-scale auto|dynamic|none] [--profiles DIR]\n"
    "         [--log-every N] [--quiet] [--op-times] [--log-json] [--metrics-port N (0: a free port)]\n"
    "         [--job-name S] [--rank R] [--world-size N] [--master-addr A] [--master-port P]\n"
    "         [--bucket-mib X] [--weight-hash-every N] [--collective-timeout SECONDS]\n"
    "         [--link LATENCY,BANDWIDTH (emulated slow link per collective, e.g. 50us,10GB/s; none)]\n"
    "         [--termination-log FILE (at exit: one JSON line with steps, checkpointStep, error)]\n"
    "  Data-parallel ranks also read MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (flags win); a GPU\n"
    "  class trains on visible CUDA device LOCAL_RANK (default 0; CUDA_VISIBLE_DEVICES decides what is visible).\n";


TrainConfig parse_train(int argc, char** argv) {
  TrainConfig c;
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--model", [&](const std::string& v) { c.model = v; }},
      {"--data", [&](const std::string& v) { c.data = v; }},
      {"--plan", [&](const std::string& v) { c.plan_path = v; }},
      {"--precision", [&](const std::string& v) { c.precision = v; }},
      {"--steps", [&](const std::string& v) {
         c.steps = parse_int_flag("--steps", v);
         if (c.steps < 1) throw std::invalid_argument("--steps must be at least 1, got " + v);
       }},
      {"--epochs", [&](const std::string& v) {
         c.epochs = parse_double_flag("--epochs", v);
         if (!(c.epochs > 0)) throw std::invalid_argument("--epochs must be positive, got " + v);
       }},
      {"--batch", [&](const std::string& v) { c.batch = parse_int_flag("--batch", v); }},
      {"--lr", [&](const std::string& v) { c.optimizer.lr = parse_double_flag("--lr", v); }},
      {"--optimizer", [&](const std::string& v) { c.optimizer.kind = optimizer_kind_from_name(v); }},
      {"--weight-decay", [&](const std::string& v) { c.optimizer.weight_decay = parse_double_flag("--weight-decay", v); }},
      {"--warmup", [&](const std::string& v) { c.optimizer.warmup_steps = parse_int_flag("--warmup", v); }},
      {"--lr-schedule", [&](const std::string& v) { c.optimizer.schedule = lr_schedule_from_name(v); }},
      {"--grad-clip", [&](const std::string& v) { c.optimizer.grad_clip = parse_double_flag("--grad-clip", v); }},
      {"--seed", [&](const std::string& v) { c.seed = uint64_t(parse_int_flag("--seed", v)); }},
      {"--eval-every", [&](const std::string& v) { c.eval_every = parse_int_flag("--eval-every", v); }},
      {"--eval-limit", [&](const std::string& v) { c.eval_limit = parse_int_flag("--eval-limit", v); }},
      {"--checkpoint-dir", [&](const std::string& v) { c.checkpoint_dir = v; }},
      {"--checkpoint-every", [&](const std::string& v) { c.checkpoint_every = parse_int_flag("--checkpoint-every", v); }},
      {"--keep-checkpoints", [&](const std::string& v) {
         c.keep_checkpoints = parse_int_flag("--keep-checkpoints", v);
         if (c.keep_checkpoints < 1) throw std::invalid_argument("--keep-checkpoints must be at least 1, got " + v);
       }},
      {"--summary-json", [&](const std::string& v) { c.summary_json = v; }},
      {"--termination-log", [&](const std::string& v) { c.termination_log = v; }},
      {"--device-class", [&](const std::string& v) { c.device_class = v; }},
      {"--threads", [&](const std::string& v) { c.threads = int(parse_int_flag("--threads", v)); }},
      {"--loss-scale", [&](const std::string& v) { c.loss_scaling = v; }},
      {"--profiles", [&](const std::string& v) { c.profiles_dir = v; }},
      {"--memory-budget", [&](const std::string& v) { c.memory_budget = parse_int_flag("--memory-budget", v) << 20; }},
      {"--log-every", [&](const std::string& v) { c.log_every = parse_int_flag("--log-every", v); }},
      {"--rank", [&](const std::string& v) { c.rank = int(parse_int_flag("--rank", v)); }},
      {"--world-size", [&](const std::string& v) { c.world_size = int(parse_int_flag("--world-size", v)); }},
      {"--master-addr", [&](const std::string& v) { c.master_addr = v; }},
      {"--master-port", [&](const std::string& v) { c.master_port = int(parse_int_flag("--master-port", v)); }},
      {"--bucket-mib", [&](const std::string& v) { c.bucket_bytes = int64_t(parse_double_flag("--bucket-mib", v) * (1 << 20)); }},
      {"--weight-hash-every", [&](const std::string& v) { c.weight_hash_every = parse_int_flag("--weight-hash-every", v); }},
      {"--collective-timeout", [&](const std::string& v) { c.collective_timeout_seconds = parse_double_flag("--collective-timeout", v); }},
      {"--link", [&](const std::string& v) { c.link = link_model_parse(v); }},
      {"--metrics-port", [&](const std::string& v) { c.metrics_port = int(parse_int_flag("--metrics-port", v)); }},
      {"--job-name", [&](const std::string& v) { c.job_name = v; }},
  };
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--resume") {
      c.resume = true;
    } else if (a == "--quiet") {
      c.quiet = true;
    } else if (a == "--op-times") {
      c.op_times = true;
    } else if (a == "--log-json") {
      c.log_json = true;
    } else if (auto it = with_value.find(a); it != with_value.end()) {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      it->second(argv[++i]);
    } else {
      throw std::invalid_argument("unknown argument '" + a + "'\n" + USAGE);
    }
  }
  if (c.model.empty()) throw std::invalid_argument(std::string("--model is required\n") + USAGE);
  if (c.steps <= 0 && c.epochs <= 0) c.epochs = 1;
  return c;
}

int worker_main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(USAGE, argc < 2 ? stderr : stdout);
    std::fputs(CALIBRATE_USAGE, argc < 2 ? stderr : stdout);
    std::fputs(PROFILE_USAGE, argc < 2 ? stderr : stdout);
    std::fputs(DEVICES_USAGE, argc < 2 ? stderr : stdout);
    std::fputs(INFER_USAGE, argc < 2 ? stderr : stdout);
    std::fputs(SPD_PLAN_USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "train") {
    train_run(parse_train(argc - 2, argv + 2));
    return 0;
  }
  if (cmd == "calibrate") {
    calibrate_run(calibrate_parse_args(argc - 2, argv + 2));
    return 0;
  }
  if (cmd == "profile") {
    profile_run(profile_parse_args(argc - 2, argv + 2));
    return 0;
  }
  if (cmd == "devices") {
    device_report_run(device_report_parse_args(argc - 2, argv + 2));
    return 0;
  }
  if (cmd == "infer") {
    infer_run(infer_parse_args(argc - 2, argv + 2));
    return 0;
  }
  if (cmd == "spd-plan") {
    spd_plan_run(spd_plan_parse_args(argc - 2, argv + 2));
    return 0;
  }
  throw std::invalid_argument("unknown command '" + cmd + "' (commands: train, calibrate, profile, devices, infer, spd-plan)\n" +
                              USAGE + CALIBRATE_USAGE + PROFILE_USAGE + DEVICES_USAGE + INFER_USAGE + SPD_PLAN_USAGE);
}

}  // namespace
}  // namespace qsync

int main(int argc, char** argv) {
  try {
    return qsync::worker_main(argc, argv);
  } catch (const qsync::CollectiveError& e) {
    std::fprintf(stderr, "qsync-worker: error: %s\n", e.what());
    return qsync::WORKER_EXIT_COLLECTIVE_FAILED;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync-worker: error: %s\n", e.what());
    return 1;
  }
}
