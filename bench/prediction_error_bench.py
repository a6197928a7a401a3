#!/usr/bin/env python3
"""Prediction-error benchmark of the planner (not a test): for zoo models x plans on a two-rank
hybrid pool (cpu-amx, or the class it falls back to here, beside cpu-avx2), the step time the
replayer predicts from the measured profiles against the median step time `qsync run` measures.

    bench/prediction_error_bench.py [--models mlp,cnn,vit,char-gpt] [--plans uniform,weak-int8-all,exact]
                                    [--rounds 3] [--json FILE]

Each configuration trains for a short run and reports rank 0's median step (every rank waits for
the same all-reduces, so the ranks' medians agree within a millisecond). `qsync run` pins each
rank to a CPU of its own and measures each class's profile on its rank's CPU. This machine's
speed drifts (a virtual machine: the same profile measured a minute apart differs by up to 30%,
and its two CPUs are not always equally fast), so the work is done in --rounds rounds: each round
measures fresh profiles (its own profile directory; calibration statistics are shared) and runs
every plan of the model once. Predicted = the median of the rounds' predictions, measured = the
median of the rounds' median steps; the spread of the measured runs (reported) is the noise
floor. Error = (predicted - measured) / measured. Run it on a quiet machine: two one-thread
workers use both cores.
"""
import argparse
import json
import os
import statistics
import tempfile

from qsync_run import ROOT, run_job

# Steps per model: enough for a stable median (the first steps warm up caches and the allocator).
STEPS = {"mlp": 200, "cnn": 40, "vit": 100, "char-gpt": 40}
BATCH = {"mlp": 128, "cnn": 128, "vit": 128, "char-gpt": 64}
PLANS = {
    "uniform": ("uniform", "int8"),            # FP32 everywhere: the weak rank is the straggler
    "weak-int8": ("uniform-low-weak", "int8"),
    "weak-int8-all": ("uniform-low-weak", "int8-all"),
    "exact": ("exact", "int8"),                # the planner's choice
    "greedy": ("greedy", "int8"),
    "dynamic-batching": ("dynamic-batching", "int8"),
}


TEXT = "/usr/share/common-licenses/GPL-3"  # char-gpt's corpus (any text file)


def job_yaml(name, model, steps, batch, allocator, low):
    data = [f"  data: {{path: {TEXT}}}"] if model == "char-gpt" else []
    return "\n".join([
        "apiVersion: qsync.dev/v1alpha1",
        "kind: HybridTrainingJob",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  model: {{zoo: {model}}}",
        *data,
        "  optimizer: {name: adamw, lr: 0.002}",
        f"  steps: {steps}",
        f"  globalBatch: {batch}",
        "  evalLimit: 100",
        f"  planning: {{allocator: {allocator}, precision: fp32, lowPrecision: {low}}}",
        "  pool:",
        "    local:",
        "      - {deviceClass: cpu-amx, threads: 1}",
        "      - {deviceClass: cpu-avx2, threads: 1}",
    ]) + "\n"


def run(name, model, plan, tmp, profiles):
    allocator, low = PLANS[plan]
    # One work dir per model: the calibration statistics are shared.
    return run_job(name, job_yaml(name, model, STEPS[model], BATCH[model], allocator, low), tmp,
                   work_dir=os.path.join(tmp, "work-" + model), extra_args=("--profiles", profiles))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn,vit,char-gpt")
    ap.add_argument("--plans", default="uniform,weak-int8-all,exact")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "results", "prediction_error.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        profiles = os.path.join(tmp, "profiles")
        for model in args.models.split(","):
            plans = args.plans.split(",")
            runs = {plan: [] for plan in plans}
            for k in range(args.rounds):
                for plan in plans:
                    runs[plan].append(run(f"{model}-{plan}", model, plan, tmp, f"{profiles}-round{k}"))
            for plan in plans:
                summaries = runs[plan]
                steps = [s["ranks"][0]["median_step_seconds"] for s in summaries]
                measured = statistics.median(steps)
                predicted = statistics.median(s["plan"]["predicted_step_seconds"] for s in summaries)
                s = summaries[steps.index(sorted(steps)[(len(steps) - 1) // 2])]  # the median run's details
                weak = s["ranks"][1]
                rows.append({"model": model, "plan": plan, "strategy": s["plan"]["strategy"],
                             "weak_plan": weak.get("plan"), "local_batches": [r["local_batch"] for r in s["ranks"]],
                             "measured_ms": measured * 1e3,
                             "measured_runs_ms": [x * 1e3 for x in steps],
                             "predicted_runs_ms": [x["plan"]["predicted_step_seconds"] * 1e3 for x in summaries],
                             "weak_plans": [x["ranks"][1].get("plan") for x in summaries],
                             "predicted_ms": predicted * 1e3, "error": (predicted - measured) / measured,
                             "ranks": [{"class": r["device_class"], "measured_compute_ms": r["median_compute_seconds"] * 1e3,
                                        "predicted_compute_ms": r["predicted"]["compute_seconds"] * 1e3,
                                        "measured_wait_ms": r["median_wait_seconds"] * 1e3,
                                        "predicted_wait_ms": r["predicted"]["wait_seconds"] * 1e3,
                                        "measured_optimizer_ms": r["median_optimizer_seconds"] * 1e3,
                                        "predicted_optimizer_ms": r["predicted"]["optimizer_seconds"] * 1e3,
                                        "measured_stats_ms": r["median_stats_seconds"] * 1e3,
                                        "cpus": r["cpus"]}
                                       for r in s["ranks"]]})
                spread = (max(steps) - min(steps)) / measured
                print(f"{model:9} {plan:14} measured {measured * 1e3:8.1f} ms (runs spread {spread * 100:4.1f}%)  "
                      f"predicted {predicted * 1e3:8.1f} ms  error {rows[-1]['error'] * 100:+6.1f}%", flush=True)
    errors = [abs(r["error"]) for r in rows]
    print()
    print("| model | plan | local batches | weak rank's plan | measured step ms (runs) | predicted ms | error |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        runs_ms = ", ".join(f"{x:.1f}" for x in r["measured_runs_ms"])
        batches = "/".join(str(b) for b in r["local_batches"])
        print(f"| {r['model']} | {r['plan']} | {batches} | {r['weak_plan']} | {r['measured_ms']:.1f} ({runs_ms}) | "
              f"{r['predicted_ms']:.1f} | {r['error'] * 100:+.1f}% |")
    print(f"\n{len(rows)} configurations: median |error| {statistics.median(errors) * 100:.1f}%, "
          f"worst {max(errors) * 100:.1f}%")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=2)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
