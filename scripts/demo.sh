#!/usr/bin/env bash
# The main job: installs what is missing, builds in Release, runs the GEMM benchmark over the CPU
# device classes, then trains the zoo CNN on Fashion-MNIST in FP32 on the strongest class and in
# INT8 on the weak cpu-avx2 class (the two ends of a hybrid pool).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
mkdir -p build/results
./build/bin/qsync-bench-gemm --json build/results/gemm.json
threads=$(( $(nproc) < 2 ? 1 : 2 ))
echo
echo "== CNN on Fashion-MNIST, FP32, strongest CPU class =="
./build/bin/qsync-worker train --model cnn --steps 400 --batch 64 --lr 2e-3 --threads "$threads" \
  --summary-json build/results/cnn-fp32.json
echo
echo "== CNN on Fashion-MNIST, INT8 on cpu-avx2 =="
./build/bin/qsync-worker train --model cnn --steps 400 --batch 64 --lr 2e-3 --threads "$threads" \
  --precision int8 --device-class cpu-avx2 --summary-json build/results/cnn-int8-avx2.json
