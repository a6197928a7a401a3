#!/usr/bin/env bash
# The main job: installs what is missing, builds in Release only what the job needs (the runner,
# the worker and the two benchmarks; ./scripts/test.sh builds the tests), runs the GEMM benchmark
# over the CPU device classes, then trains the zoo CNN on Fashion-MNIST synchronously over a
# hybrid pool of two local workers with `qsync run`: a strong cpu-avx2 rank (the training-GPU
# stand-in) and a weak cpu-sse41 rank (the inference-GPU stand-in). Both classes exist on every
# x86-64 CPU this project runs on, so the pool is hybrid everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh
./scripts/build.sh --target qsync --target qsync-worker --target qsync-bench-gemm --target qsync-bench-allreduce
echo "demo: installed and built in $(( $(date +%s) - start )) s"
mkdir -p build/results
./build/bin/qsync-bench-gemm --json build/results/gemm.json
echo
# After the job, 30 steps each of uniform FP32 (the weak rank is the straggler; the strong one
# waits) and of uniform low precision on the weak rank, beside the job's plan.
./build/bin/qsync run examples/jobs/fmnist-hybrid.yaml --work-dir build/jobs/fmnist-hybrid \
  --summary-json build/results/fmnist-hybrid.json --compare uniform,uniform-low-weak
