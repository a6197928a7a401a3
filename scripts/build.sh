#!/usr/bin/env bash
# Configures and builds QSync in Release into build/ (executables in build/bin/).
# CUDA backends are built when nvcc is found (also looked for in /usr/local/cuda/bin), for this
# machine's GPU when it has one, else for one architecture (sm90) so the CUDA code is compiled and
# linked; QSYNC_CUDA_ARCHITECTURES="75;80;86;89;90" overrides (the worker image builds them all).
# Usage: scripts/build.sh [--target T ...] [extra cmake args...]
#   --target T   build only T (and what it needs); repeatable. Default: everything, tests included.
# ccache is used when it is installed (QSYNC_NO_CCACHE=1 turns that off). QSYNC_BUILD_DIR: the
# build folder (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=(--target "$2"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
if [ -z "${QSYNC_CUDA_ARCHITECTURES:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    QSYNC_CUDA_ARCHITECTURES=native
  else
    QSYNC_CUDA_ARCHITECTURES=90
  fi
fi
cmake_args+=("-DQSYNC_CUDA_ARCHITECTURES=$QSYNC_CUDA_ARCHITECTURES")
if command -v ccache >/dev/null 2>&1 && [ -z "${QSYNC_NO_CCACHE:-}" ]; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
jobs=${QSYNC_BUILD_JOBS:-$(nproc)}
dir=${QSYNC_BUILD_DIR:-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${cmake_args[@]+"${cmake_args[@]}"}
cmake --build "$dir" -j "$jobs" ${targets[@]+"${targets[@]}"}
