#!/usr/bin/env bash
# The main job: installs what is missing, builds in Release, and runs the GEMM benchmark over
# the CPU device classes (the project's main job until hybrid training lands).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
mkdir -p build/results
./build/bin/qsync-bench-gemm --json build/results/gemm.json "$@"
