#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest (CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j "${QSYNC_TEST_JOBS:-2}" --timeout 600
