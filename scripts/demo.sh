#!/usr/bin/env bash
# The main job: installs what is missing, builds in Release, runs the GEMM benchmark over the CPU
# device classes, then trains the zoo CNN on Fashion-MNIST synchronously over a hybrid pool of
# two local workers (a strong cpu-amx rank and a weak cpu-avx2 rank) with `qsync run`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
mkdir -p build/results
./build/bin/qsync-bench-gemm --json build/results/gemm.json
echo
./build/bin/qsync run examples/jobs/fmnist-hybrid.yaml --work-dir build/jobs/fmnist-hybrid \
  --summary-json build/results/fmnist-hybrid.json
