// File: worker/profiler_cli.cpp
// `qsync-worker profile`'s command line (profile_parse_args) and the summary table it prints
// (profile_summary); the measurement itself is profiler.cpp's.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "planner/cli_args.h"
#include "worker/profiler.h"

namespace qsync {

const char* const PROFILE_USAGE =
    "usage: qsync-worker profile --model FILE|NAME --device-class C --batch B --out FILE [--threads N]\n"
    "         [--data DIR|FILE] [--steps S (measured steps per round, default 5)]\n"
    "         [--rounds R (passes over the precisions, default 3)] [--optimizer adamw|sgd] [--seed S] [--quiet]\n"
    "         [--world-signature TEXT (names the world of RANK/WORLD_SIZE in the profile)]\n"
    "         [--shared-cpus (the world's ranks share the CPUs: every rank passes it)]\n";

ProfileConfig profile_parse_args(int argc, char** argv) {
  ProfileConfig c;
  const auto integer = parse_int_flag;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet" || a == "--shared-cpus") {
      (a == "--quiet" ? c.quiet : c.shared_cpus) = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value\n" + PROFILE_USAGE);
    const std::string v = argv[++i];
    if (a == "--model") c.model = v;
    else if (a == "--device-class") c.device_class = v;
    else if (a == "--batch") c.batch = integer(a, v);
    else if (a == "--threads") c.threads = int(integer(a, v));
    else if (a == "--data") c.data = v;
    else if (a == "--steps") c.steps = integer(a, v);
    else if (a == "--rounds") c.rounds = integer(a, v);
    else if (a == "--out") c.out = v;
    else if (a == "--optimizer") c.optimizer.kind = optimizer_kind_from_name(v);
    else if (a == "--seed") c.seed = uint64_t(integer(a, v));
    else if (a == "--world-signature") c.world_signature = v;
    else throw std::invalid_argument("unknown argument '" + a + "'\n" + PROFILE_USAGE);
  }
  for (const auto& [flag, missing] : {std::pair<const char*, bool>{"--model", c.model.empty()},
                                      {"--device-class", c.device_class.empty()}, {"--batch", c.batch == 0},
                                      {"--out", c.out.empty()}})
    if (missing) throw std::invalid_argument(std::string(flag) + " is required\n" + PROFILE_USAGE);
  return c;
}

std::string profile_summary(const DeviceProfile& p) {
  char buf[256];
  std::string out = "profile of " + p.model + " on " + p.device_class + " at batch " + std::to_string(p.batch) +
                    (p.estimated ? " (ESTIMATED)" : "") + "\n  " + p.source + "\n";
  const std::vector<LayerPrecision> precisions = p.precisions();
  std::snprintf(buf, sizeof buf, "%-24s", "layer (fwd+bwd ms)");
  out += buf;
  for (LayerPrecision lp : precisions) {
    std::snprintf(buf, sizeof buf, " %9s", layer_precision_name(lp));
    out += buf;
  }
  out += "   saved input MiB (fp32 / smallest)\n";
  for (const auto& [layer, costs] : p.gemm_layers) {
    std::snprintf(buf, sizeof buf, "%-24s", layer.c_str());
    out += buf;
    int64_t lowest = std::numeric_limits<int64_t>::max();
    for (LayerPrecision lp : precisions) {
      const LayerCost& c = costs.at(lp);
      lowest = std::min(lowest, c.saved_bytes);
      std::snprintf(buf, sizeof buf, " %9.3f", (c.forward_seconds + c.backward_seconds) * 1e3);
      out += buf;
    }
    const auto fp32 = costs.find(LayerPrecision::FP32);
    std::snprintf(buf, sizeof buf, "   %.2f / %.2f\n", fp32 == costs.end() ? 0.0 : double(fp32->second.saved_bytes) / 1048576.0,
                  double(lowest) / 1048576.0);
    out += buf;
  }
  for (const auto& [layer, c] : p.other_layers) {
    std::snprintf(buf, sizeof buf, "%-24s %9.3f (fp32, non-GEMM)   %.2f\n", layer.c_str(),
                  (c.forward_seconds + c.backward_seconds) * 1e3, double(c.saved_bytes) / 1048576.0);
    out += buf;
  }
  for (const auto* table : {&p.casts, &p.channel_casts})
    for (const auto& [key, f] : *table) {
      std::snprintf(buf, sizeof buf, "cast %s -> %s%s: %.3f ns/element + %.1f us\n", precision_name(key.first),
                    precision_name(key.second), table == &p.channel_casts ? " (per channel)" : "", f.a * 1e9, f.b * 1e6);
      out += buf;
    }
  std::snprintf(buf, sizeof buf, "optimizer step %.3f ms; static %.2f MiB; rest of a step %.3f ms, %.2f MiB\n",
                p.optimizer_seconds * 1e3, double(p.static_bytes) / 1048576.0, p.step_overhead_seconds * 1e3,
                double(p.step_overhead_bytes) / 1048576.0);
  out += buf;
  if (p.world_size > 1) {
    std::snprintf(buf, sizeof buf, "whole FP32 step of the world of %d: %.3f ms (%s)\n", p.world_size,
                  p.world_step_seconds * 1e3, p.world_signature.empty() ? "unnamed" : p.world_signature.c_str());
    out += buf;
  }
  return out;
}

}  // namespace qsync
