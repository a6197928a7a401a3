#!/usr/bin/env python3
"""Data-parallel benchmark of `qsync run` (not a test): 1 -> 2 rank scaling, and the straggler
picture of a hybrid pool (a strong cpu-amx rank beside a weak cpu-avx2 rank) at uniform FP32
versus low precision on the weak rank, with each rank's compute time and time spent waiting at
the gradient all-reduce. This is the gap the planner must close.

    bench/data_parallel_bench.py [--model cnn] [--steps 60] [--batch 128] [--json FILE]

Each configuration is a generated HybridTrainingJob run by build/bin/qsync; figures are the
workers' medians over the run. Timings on a shared 2-core machine are noisy: compare ratios
within one run of this script.
"""
import argparse
import json
import os
import tempfile

from qsync_run import ROOT, run_job


def job_yaml(name, model, steps, batch, workers):
    lines = [
        "apiVersion: qsync.dev/v1alpha1",
        "kind: HybridTrainingJob",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  model: {{zoo: {model}}}",
        "  optimizer: {name: adamw, lr: 0.002}",
        f"  steps: {steps}",
        f"  globalBatch: {batch}",
        "  evalLimit: 200",
        "  planning: {allocator: uniform, precision: fp32}",
        "  pool:",
        "    local:",
    ]
    for w in workers:
        extra = f", precision: {w['precision']}" if w.get("precision") else ""
        lines.append(f"      - {{deviceClass: {w['class']}, threads: 1{extra}}}")
    return "\n".join(lines) + "\n"


def run(name, model, steps, batch, workers, tmp):
    return run_job(name, job_yaml(name, model, steps, batch, workers), tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "results", "data_parallel.json"))
    args = ap.parse_args()
    configs = [
        ("one-rank-amx", [{"class": "cpu-amx"}]),
        ("two-ranks-amx", [{"class": "cpu-amx"}, {"class": "cpu-amx"}]),
        ("hybrid-fp32", [{"class": "cpu-amx"}, {"class": "cpu-avx2"}]),
        ("hybrid-weak-int8", [{"class": "cpu-amx"}, {"class": "cpu-avx2", "precision": "int8"}]),
        ("hybrid-weak-int8-all", [{"class": "cpu-amx"}, {"class": "cpu-avx2", "precision": "int8-all"}]),
    ]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, workers in configs:
            results[name] = run(name, args.model, args.steps, args.batch, workers, tmp)
    print(f"{args.model}, global batch {args.batch}, {args.steps} steps, 1 thread per rank")
    print(f"{'config':22} {'samples/s':>10} {'rank':>4} {'class':>11} {'precision':>10} "
          f"{'step ms':>8} {'compute ms':>10} {'wait ms':>8} {'allreduce ms':>12}")
    for name, s in results.items():
        for r in s["ranks"]:
            prec = (r.get("plan") or "").split(" ")[0].split("=")[-1]
            print(f"{name:22} {s['samples_per_second'] or 0:10.0f} {r['rank']:4d} {r['device_class']:>11} {prec:>10} "
                  f"{(r['median_step_seconds'] or 0) * 1e3:8.1f} {(r['median_compute_seconds'] or 0) * 1e3:10.1f} "
                  f"{(r['median_wait_seconds'] or 0) * 1e3:8.1f} {(r['median_allreduce_seconds'] or 0) * 1e3:12.1f}")
    one = results["one-rank-amx"]["samples_per_second"]
    two = results["two-ranks-amx"]["samples_per_second"]
    print(f"scaling 1 -> 2 ranks (same class, same global batch): {two / one:.2f}x samples/s")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
