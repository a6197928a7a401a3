#!/usr/bin/env python3
"""Prediction-error benchmark of the replayer on plans the profiles never saw (not a test).

    bench/prediction_error_bench.py [--models mlp,cnn,vit,char-gpt] [--pools 2,3,4] [--rounds 3]
                                    [--json FILE] [--markdown FILE]

For each (model, pool) the profiles are measured ONCE, by `qsync run` itself, at the job's even
split (one profile per class at that local batch, all ranks at once as one world). Then every
configuration of that (model, pool) runs with `qsync run --plans DIR --profiles P`: the plan files
are given, so nothing is re-measured, and the prediction is the replayer's over those profiles,
scaled to the plan's local batches (planner/device_profile.h). The held-out configurations:

  mixed-random   per-layer precisions drawn at random on the weak ranks (several cast boundaries)
  mixed-exact    the plan the `exact` allocator chooses (a mixed plan on this pool)
  batch-moved    a random mixed plan at another split of the global batch than the profiled one
  uniform-*      uniform plans (FP32 everywhere, int8-all on the weak ranks): reported apart, since
                 the FP32 plan is what the profile's residual was fitted to

Pools: 2 ranks (cpu-avx2 + cpu-sse41) for every model; 3 and 4 ranks (cpu-avx2 + cpu-sse41 x2,
cpu-avx2 x2 + cpu-sse41 x2) for mlp and cnn. On a 2-CPU machine pools above 2 ranks cannot give
every rank a CPU of its own: they run unpinned and share the CPUs (noted in the table), and their
predictions are the shared-CPU model's (planner/shared_cpu_model.h: the ranks' compute as a span
over the shared CPUs, fitted on the profiling world's measured FP32 step): measured once with the
profiles, like them.

Each round runs every configuration once in a shuffled order (interleaved repeats); predicted =
the plan's prediction (the same every round: the profiles are fixed), measured = the median over
rounds of each run's median step (rank 0's: the ranks wait for the same all-reduces), spread =
(max - min) / median of the rounds. The noise floor is the same configuration repeated: the
median spread. Error = (predicted - measured) / measured.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

from qsync_run import QSYNC, ROOT

TEXT = "/usr/share/common-licenses/GPL-3"  # char-gpt's corpus (any text file)
STEPS = {"mlp": 150, "cnn": 30, "vit": 80, "char-gpt": 30}
BATCH = {"mlp": 128, "cnn": 128, "vit": 128, "char-gpt": 64}
POOLS = {
    "2": ["cpu-avx2", "cpu-sse41"],
    "3": ["cpu-avx2", "cpu-sse41", "cpu-sse41"],
    "4": ["cpu-avx2", "cpu-avx2", "cpu-sse41", "cpu-sse41"],
}
POOLS_OF = {"mlp": ["2", "3", "4"], "cnn": ["2", "3", "4"], "vit": ["2"], "char-gpt": ["2"]}
WEAK_CHOICES = ["fp32", "bf16", "fp16", "int8", "int8-all"]


def job_yaml(name, model, steps, batch, classes, allocator="exact"):
    data = [f"  data: {{path: {TEXT}}}"] if model == "char-gpt" else []
    return "\n".join([
        "apiVersion: qsync.dev/v1alpha1", "kind: HybridTrainingJob", f"metadata: {{name: {name}}}", "spec:",
        f"  model: {{zoo: {model}}}", *data, "  optimizer: {name: adamw, lr: 0.002}", f"  steps: {steps}",
        f"  globalBatch: {batch}", "  evalLimit: 50",
        f"  planning: {{allocator: {allocator}, precision: fp32, lowPrecision: int8-all}}", "  pool:", "    local:",
        *[f"      - {{deviceClass: {c}, threads: 1}}" for c in classes]]) + "\n"


def qsync_run(job_path, work, summary, extra):
    proc = subprocess.run([QSYNC, "run", job_path, "--work-dir", work, "--summary-json", summary, "--quiet", *extra],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{job_path} failed:\n{proc.stdout}\n{proc.stderr}")
    with open(summary) as f:
        return json.load(f)


def write_plans(dirpath, model_name, model_hash, layers, classes, precisions, batches):
    os.makedirs(dirpath, exist_ok=True)
    for r, cls in enumerate(classes):
        lines = ["# prediction_error_bench: a held-out plan", f"model: {model_name}", f'model_hash: "{model_hash}"',
                 f"rank: {r}", f"device_class: {cls}", f"local_batch: {batches[r]}", "default: fp32", "layers:"]
        lines += [f"  {l}: {p}" for l, p in zip(layers, precisions[r])]
        with open(os.path.join(dirpath, f"rank-{r}.yaml"), "w") as f:
            f.write("\n".join(lines) + "\n")


def random_weak_plan(rng, n):
    """Precisions with at least two cast boundaries (a neighbour of another precision)."""
    while True:
        p = [rng.choice(WEAK_CHOICES) for _ in range(n)]
        if sum(1 for a, b in zip(p, p[1:]) if a != b) >= 2 or n < 3:
            return p


def read_plan(path):
    layers, out, hash_, name = [], {}, None, None
    with open(path) as f:
        in_layers = False
        for line in f:
            if line.startswith("model_hash:"):
                hash_ = line.split(":", 1)[1].strip().strip('"')
            elif line.startswith("model:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("layers:"):
                in_layers = True
            elif in_layers and line.startswith("  "):
                k, v = line.strip().split(": ")
                layers.append(k)
                out[k] = v
    return name, hash_, layers, out


def configurations(model, pool, tmp, rng):
    """Profiles once (the exact plan's run), then the held-out configurations of (model, pool)."""
    classes = POOLS[pool]
    batch, n = BATCH[model], len(classes)
    name = f"{model}-p{pool}"
    job = os.path.join(tmp, name + ".yaml")
    with open(job, "w") as f:
        f.write(job_yaml(name, model, STEPS[model], batch, classes))
    profiles = os.path.join(tmp, name + "-profiles")
    work = os.path.join(tmp, name + "-work")
    # The exact plan's run measures the profiles (at the even split) and writes the plan files.
    exact = qsync_run(job, work, os.path.join(tmp, name + "-exact.json"),
                      ["--profiles", profiles] + (["--no-pin"] if n > 2 else []))
    model_name, model_hash, layers, _ = read_plan(os.path.join(work, "plans", "rank-0.yaml"))
    even = [batch // n + (1 if r < batch % n else 0) for r in range(n)]
    weak = [r for r, c in enumerate(classes) if c == "cpu-sse41"]
    configs = {}
    exact_plans = os.path.join(tmp, name + "-plans-exact")
    os.makedirs(exact_plans, exist_ok=True)
    for r in range(n):
        with open(os.path.join(work, "plans", f"rank-{r}.yaml")) as src, open(os.path.join(exact_plans, f"rank-{r}.yaml"), "w") as dst:
            dst.write(src.read())
    configs["mixed-exact"] = exact_plans
    for k in range(2):
        precisions = [["fp32"] * len(layers) for _ in range(n)]
        for r in weak:
            precisions[r] = random_weak_plan(rng, len(layers))
        d = os.path.join(tmp, f"{name}-plans-random{k}")
        write_plans(d, model_name, model_hash, layers, classes, precisions, even)
        configs[f"mixed-random-{k}"] = d
    moved = list(even)
    shift = max(1, batch // 8)
    for r in weak:
        moved[r] -= shift // len(weak)
    moved[0] += sum(even) - sum(moved)
    precisions = [["fp32"] * len(layers) for _ in range(n)]
    for r in weak:
        precisions[r] = random_weak_plan(rng, len(layers))
    d = os.path.join(tmp, f"{name}-plans-moved")
    write_plans(d, model_name, model_hash, layers, classes, precisions, moved)
    configs["batch-moved"] = d
    for label, weak_p in (("uniform-fp32", "fp32"), ("uniform-weak-int8-all", "int8-all")):
        precisions = [[weak_p if r in weak else "fp32"] * len(layers) for r in range(n)]
        d = os.path.join(tmp, f"{name}-plans-{label}")
        write_plans(d, model_name, model_hash, layers, classes, precisions, even)
        configs[label] = d
    return job, profiles, configs, exact


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn,vit,char-gpt")
    ap.add_argument("--pools", default="2,3,4", help="pool sizes to run (of those each model has: 3 and 4 for mlp and cnn)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "results", "prediction_error.json"))
    ap.add_argument("--markdown", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        setups = []
        for model in args.models.split(","):
            for pool in [p for p in POOLS_OF[model] if p in args.pools.split(",")]:
                job, profiles, configs, _ = configurations(model, pool, tmp, rng)
                for label, plans in configs.items():
                    setups.append({"model": model, "pool": pool, "config": label, "job": job, "profiles": profiles,
                                   "plans": plans, "runs": []})
                print(f"profiled {model} on pool {pool}: {len(configs)} configurations", flush=True)
        for k in range(args.rounds):
            order = list(range(len(setups)))
            rng.shuffle(order)
            for i in order:
                s = setups[i]
                extra = ["--profiles", s["profiles"], "--plans", s["plans"]] + (["--no-pin"] if s["pool"] != "2" else [])
                summary = qsync_run(s["job"], os.path.join(tmp, f"w{i}-{k}"), os.path.join(tmp, f"s{i}-{k}.json"), extra)
                s["runs"].append(summary)
            print(f"round {k + 1}/{args.rounds} done", flush=True)
        for s in setups:
            steps = [r["ranks"][0]["median_step_seconds"] for r in s["runs"]]
            measured = statistics.median(steps)
            predicted = s["runs"][0]["plan"]["predicted_step_seconds"]
            first = s["runs"][0]
            rows.append({"model": s["model"], "pool": s["pool"], "config": s["config"],
                         "held_out": not s["config"].startswith("uniform"),
                         "local_batches": [r["local_batch"] for r in first["ranks"]],
                         "plans": [r.get("plan") for r in first["ranks"]],
                         "predicted_ms": predicted * 1e3, "measured_ms": measured * 1e3,
                         "runs_ms": [x * 1e3 for x in steps], "spread": (max(steps) - min(steps)) / measured,
                         "error": (predicted - measured) / measured})
    report(rows, args)


def summary_line(group):
    if not group:
        return "none"
    errors = [abs(r["error"]) for r in group]
    return f"{len(group)} configurations: median |error| {statistics.median(errors) * 100:.1f}%, worst {max(errors) * 100:.1f}%"


def report(rows, args):
    out = ["| model | pool | configuration | local batches | measured step ms (rounds) | spread | predicted ms | error |",
           "|---|---|---|---|---|---|---|---|"]
    for held in (True, False):
        for r in rows:
            if r["held_out"] != held:
                continue
            runs = ", ".join(f"{x:.1f}" for x in r["runs_ms"])
            out.append(f"| {r['model']} | {r['pool']} | {r['config']} | {'/'.join(str(b) for b in r['local_batches'])} | "
                       f"{r['measured_ms']:.1f} ({runs}) | {r['spread'] * 100:.1f}% | {r['predicted_ms']:.1f} | "
                       f"{r['error'] * 100:+.1f}% |")
    held = [r for r in rows if r["held_out"]]
    out += ["", "Held-out plans and batches: " + summary_line(held),
            "- mixed plans at the profiled split: " + summary_line([r for r in held if r["config"] != "batch-moved"]),
            "- at another split of the batch: " + summary_line([r for r in held if r["config"] == "batch-moved"]),
            "- pools of 3 and 4 ranks (unpinned, sharing 2 CPUs): " + summary_line([r for r in held if r["pool"] != "2"]),
            "Uniform plans (apart): " + summary_line([r for r in rows if not r["held_out"]]),
            f"Noise floor (the same configuration over {args.rounds} rounds): median spread "
            f"{statistics.median(r['spread'] for r in rows) * 100:.1f}%, largest {max(r['spread'] for r in rows) * 100:.1f}%"]
    text = "\n".join(out)
    print(text)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    print("wrote", args.json)


if __name__ == "__main__":
    main()
