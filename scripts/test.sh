#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest (CUDA tests skip without a GPU);
# then builds the fuzz targets (clang, ASan+UBSan, build-fuzz/) and runs each briefly on its seeds
# (QSYNC_CI_FUZZ_SECONDS each, default 10, with libFuzzer's seed fixed at QSYNC_FUZZ_SEED, default
# 1, so a rerun tries the same inputs; QSYNC_SKIP_FUZZ=1 skips this step).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# Test tools from PyPI: Helm's Go SDK (helm-python-sdk) renders and lints the chart.
python3 -m pip install --quiet --disable-pip-version-check -r tests/charts/requirements.txt
./scripts/build.sh
(cd build && ctest --output-on-failure -j "${QSYNC_TEST_JOBS:-2}" --timeout 600)
if [ -z "${QSYNC_SKIP_FUZZ:-}" ] && command -v clang++ >/dev/null 2>&1; then
  QSYNC_FUZZ_SEED="${QSYNC_FUZZ_SEED:-1}" ./scripts/fuzz.sh "${QSYNC_CI_FUZZ_SECONDS:-10}"
fi
