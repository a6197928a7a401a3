#!/usr/bin/env bash
# File: scripts/gpu-check.sh
# The GPU check of QSync's training engine on one NVIDIA GPU: written for the H200 that the
# `device` tool lends (one run, at most 8 minutes of device time), runnable on any sm90 machine.
# Two halves, because the device image has CUDA 13 and PyTorch but none of the Debian libraries
# the project builds with (oneDNN, Gloo, yaml-cpp, prometheus-cpp, GoogleTest...) and no network:
#
#   here    scripts/gpu-check.sh --prepare [--dry-run]
#           builds build-gpu (Release, -DQSYNC_CUDA_ARCHITECTURES=90, ccache) for the targets the
#           check runs, strips them, bundles them with the shared libraries the device image
#           lacks (from ldd; CUDA's own libraries, glibc and libstdc++ come from the device), a
#           Fashion-MNIST subset and a text corpus, into build-gpu/gpu-check-bundle.tar.xz
#           (git-ignored: build-*), and checks that it and the working tree stay under the
#           64 MiB that travels. --dry-run then runs the check against the bundle here: every
#           step that needs no GPU runs (the CPU halves, fewer steps), the GPU steps must skip or
#           refuse cleanly, so the script has run end to end before a device is ever lent.
#   there   scripts/gpu-check.sh --run
#           (device tool: carry ["build-gpu/gpu-check-bundle.tar.xz"], timeout_s 450; the
#           command: bash scripts/gpu-check.sh --run 2>&1 | tee $OUT/gpu-check.log)
#
# What --run prints and checks (PASS / FAIL; targets are reported MET / MISSED, not failed):
#   1  GPU, driver and library versions (nvidia-smi, qsync-worker devices, PyTorch)
#   2  every CUDA unit test; on a GPU any skipped test fails the check
#   3  the per-layer GPU-vs-CPU table, every precision: largest relative error of y, dx, dW
#      against each precision's bound (device_layers_test's "[ gpu-vs-cpu ]" lines)
#   4  the CNN and the char-GPT trained a few hundred steps with a mixed plan on the GPU beside
#      the CPU run of the same seed (loss curves side by side); fp32 GPU vs CPU over 50 steps
#      within 1e-3 (target)
#   5  GEMM TFLOP/s per precision at 8192^3 against the datasheet's dense peak; targets: bf16
#      >= 60% of peak, int8 and fp8 >= 1.6x bf16
#   6a a measured profile of the CNN on the GPU (qsync-worker profile), and the planner's
#      prediction from it against the measured step (target: within 25%)
#   6  the step time of gpt-768 (width 768, 12 blocks, context 256) against PyTorch eager on the
#      same GPU, same model and batch: fp32, tf32 and bf16 (autocast); target: our bf16 no
#      slower than PyTorch's bf16 (goal 1.3x faster)
#   7  peak device memory against the planner's prediction (target: within 10%)
#   8  a 2-rank job of one GPU rank and one CPU rank (gradients over Gloo through pinned host
#      buckets), the weight hashes compared every 10 steps
# Results, one line each, end in a summary; the exit status is the number of FAILs.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${QSYNC_GPU_BUILD:-$ROOT/build-gpu}
BUNDLE_NAME=gpu-check-bundle
ARCHIVE=$BUILD/$BUNDLE_NAME.tar.xz
LIMIT_MIB=64
TARGETS=(qsync-worker gemm_cublaslt_test cublaslt_matmul_test cudnn_conv_test quantize_cuda_test cuda_ops_test
  device_layers_test device_train_test)
CUDA_TESTS=(gemm_cublaslt_test cublaslt_matmul_test cudnn_conv_test quantize_cuda_test cuda_ops_test device_layers_test
  device_train_test)

mode="" dry=0
for a in "$@"; do
  case "$a" in
    --prepare) mode=prepare ;;
    --run) mode=run ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$a' (use --prepare [--dry-run] or --run)" >&2; exit 2 ;;
  esac
done
[ -n "$mode" ] || { echo "gpu-check: say --prepare [--dry-run] (here) or --run (on the GPU machine)" >&2; exit 2; }

PASSES=0 FAILS=0 RESULTS=()
result() {  # result PASS|FAIL|MET|MISSED|SKIP "what"
  RESULTS+=("$(printf '%-6s %s' "$1" "$2")")
  echo "[$1] $2"
  case "$1" in PASS) PASSES=$((PASSES + 1)) ;; FAIL) FAILS=$((FAILS + 1)) ;; esac
}
section() { echo; echo "==== $* ($(date +%T), ${SECONDS}s)"; }
# ... | targets: passes lines through, recording "[MET] x" / "[MISSED] x" lines as results
# (lastpipe: the loop runs in this shell, so RESULTS keeps them).
shopt -s lastpipe
targets() {
  local line
  while IFS= read -r line; do
    case "$line" in
      "[MET]"*) result MET "$(sed 's/^ *//' <<<"${line#\[MET\]}")" ;;
      "[MISSED]"*) result MISSED "$(sed 's/^ *//' <<<"${line#\[MISSED\]}")" ;;
      *) echo "$line" ;;
    esac
  done
}
# in_budget "what": false (and a SKIP) once the run has used its time; the device lends 8 minutes,
# its start and the transfers included, so the checks stop starting new sections after BUDGET.
BUDGET=${QSYNC_GPU_CHECK_BUDGET:-360}
in_budget() {
  [ "$SECONDS" -lt "$BUDGET" ] && return 0
  result SKIP "$1: out of time (${SECONDS}s used of the ${BUDGET}s budget; QSYNC_GPU_CHECK_BUDGET)"
  return 1
}

# ----------------------------------------------------------------------------------------------
# Here: build, bundle, size

prepare() {
  section "build ($BUILD, sm90)"
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQSYNC_CUDA_ARCHITECTURES=90 "${launcher[@]}" \
    >"$BUILD/gpu-check.configure.log" 2>&1 || { tail -20 "$BUILD/gpu-check.configure.log"; echo "gpu-check: cmake failed"; exit 1; }
  ninja -C "$BUILD" -j"${JOBS:-2}" "${TARGETS[@]}" || { echo "gpu-check: the build failed"; exit 1; }

  section "bundle"
  local b=$BUILD/$BUNDLE_NAME
  rm -rf "$b" && mkdir -p "$b/bin" "$b/libexec" "$b/lib" "$b/data"
  cp "$BUILD/bin/qsync-worker" "$b/libexec/"
  for t in "${CUDA_TESTS[@]}"; do cp "$BUILD/tests/$t" "$b/libexec/"; done
  strip --strip-unneeded "$b"/libexec/*
  # bin/ holds one wrapper per program that puts the bundle's libraries (and CUDA's, found at
  # run time) on LD_LIBRARY_PATH for that program only: PyTorch, run beside it, keeps its own.
  for p in "$b"/libexec/*; do
    printf '#!/bin/sh\nd=$(dirname "$0")/..\nLD_LIBRARY_PATH="$d/lib${QSYNC_CUDA_LIBS:+:$QSYNC_CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/libexec/%s" "$@"\n' \
      "$(basename "$p")" >"$b/bin/$(basename "$p")"
    chmod +x "$b/bin/$(basename "$p")"
  done
  # Shared libraries the device image lacks: everything ldd resolves except CUDA's own (the
  # device's toolkit and PyTorch's nvidia-* wheels have them), glibc, libstdc++ and libgcc
  # (the device's are newer: Ubuntu 24.04 against our Debian 12).
  ldd "$b"/libexec/* | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      libc.so*|libm.so*|libmvec.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      *) cp -L "$path" "$b/lib/$name" ;;
    esac
  done
  # Data: a Fashion-MNIST subset (12000 training, 2000 test images) and a text corpus.
  python3 - "$b/data/fashion-mnist" <<'PY'
import gzip, os, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
os.makedirs(dst, exist_ok=True)
for part, keep in (("train", 12000), ("t10k", 2000)):
    for kind, head in (("images-idx3", 16), ("labels-idx1", 8)):
        name = f"{part}-{kind}-ubyte.gz"
        raw = gzip.open(os.path.join(src, name)).read()
        h = bytearray(raw[:head]); struct.pack_into(">I", h, 4, keep)
        per = 784 if kind.startswith("images") else 1
        with gzip.open(os.path.join(dst, name), "wb", compresslevel=9) as f:
            f.write(bytes(h) + raw[head:head + keep * per])
PY
  cat "$ROOT"/README.md "$ROOT"/docs/*.md > "$b/data/corpus.txt"
  # The model zoo: the binaries know this tree's path, which the GPU machine's copy does not share.
  cp -r "$ROOT/examples/models" "$b/models"
  tar -C "$BUILD" -cJf "$ARCHIVE" "$BUNDLE_NAME"

  section "size (what travels: the working tree and the bundle, at most $LIMIT_MIB MiB)"
  local tree bundle total
  tree=$(cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
  bundle=$(stat -c %s "$ARCHIVE")
  total=$((tree + bundle))
  awk -v t="$tree" -v b="$bundle" -v a="$ARCHIVE" \
    'BEGIN { printf "tree %.1f MiB + bundle %.1f MiB (%s) = %.1f MiB\n", t / 1048576, b / 1048576, a, (t + b) / 1048576 }'
  du -sh "$b"/libexec/* "$b"/lib "$b"/data | sed 's/^/  unpacked /'
  if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then result FAIL "bundle + tree exceed $LIMIT_MIB MiB"; else result PASS "bundle + tree fit in $LIMIT_MIB MiB"; fi
}

# ----------------------------------------------------------------------------------------------
# There (or here, dry): the checks

setup_run() {
  WORK=${QSYNC_GPU_CHECK_WORK:-/tmp/qsync-gpu-check}
  rm -rf "$WORK" && mkdir -p "$WORK"
  [ -f "$ARCHIVE" ] || { echo "gpu-check: no $ARCHIVE: run scripts/gpu-check.sh --prepare here, and carry it"; exit 1; }
  if command -v xz >/dev/null; then tar -C "$WORK" -xJf "$ARCHIVE"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$ARCHIVE" "$WORK"; fi  # no xz there
  chmod +x "$WORK/$BUNDLE_NAME"/bin/* "$WORK/$BUNDLE_NAME"/libexec/*
  B=$WORK/$BUNDLE_NAME
  BIN=$B/bin DATA=$B/data
  # CUDA's libraries, for the wrappers in bin/: the toolkit's, then PyTorch's nvidia-* wheels
  # (cuDNN and NCCL live there).
  local libs="" py site
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/nvidia/lib64; do [ -d "$d" ] && libs=$libs${libs:+:}$d; done
  py=$(command -v python3 || true)
  if [ -n "$py" ]; then
    site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
    for s in $site; do for d in "$s"/nvidia/*/lib "$s"/nvidia/*/lib64; do [ -d "$d" ] && libs=$libs${libs:+:}$d; done; done
  fi
  # Any library still missing is looked for once under /usr and /opt (a wheel laid out otherwise).
  local missing name found
  missing_libs() { LD_LIBRARY_PATH="$B/lib${libs:+:$libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$B"/libexec/* 2>/dev/null | grep "not found" | sort -u; }
  for name in $(missing_libs | awk '{print $1}'); do
    found=$(find /usr /opt -name "$name" 2>/dev/null | head -1)
    [ -n "$found" ] && libs=$libs${libs:+:}$(dirname "$found")
  done
  export QSYNC_CUDA_LIBS=$libs
  export QSYNC_MODEL_ZOO=$B/models QSYNC_FASHION_MNIST=$DATA/fashion-mnist
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  echo "CUDA libraries from: ${libs:-(none found)}"
  missing=$(missing_libs)
  if [ -n "$missing" ]; then result FAIL "libraries not found: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"; else result PASS "every library resolves"; fi
  GPU=0
  if [ "$dry" = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then GPU=1; fi
  GPU_CLASS=gpu-h200
  CPU_CLASS=cpu-avx512
  grep -q avx512_vnni /proc/cpuinfo || CPU_CLASS=cpu-avx2
  THREADS=$(nproc)
  [ "$THREADS" -gt 8 ] && THREADS=8
}

# run_timeout SECONDS LOG cmd...: runs with a deadline, output to LOG (and its tail on failure).
run_timeout() {
  local secs=$1 log=$2; shift 2
  timeout --kill-after=10 "$secs" "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then echo "  (exit $rc; last lines of $log:)"; tail -15 "$log" | sed 's/^/  | /'; fi
  return $rc
}

json_field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d$2)" "$1" 2>/dev/null; }

check_versions() {
  section "1 versions"
  if [ "$GPU" = 1 ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  else
    echo "no GPU here (dry run)"
  fi
  "$BIN/qsync-worker" devices --json "$WORK/devices.json" && result PASS "qsync-worker devices" || result FAIL "qsync-worker devices"
  python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>/dev/null \
    || echo "PyTorch: not importable here"
}

check_unit_tests() {
  section "2 CUDA unit tests"
  for t in "${CUDA_TESTS[@]}"; do
    local log=$WORK/$t.log secs=120
    [ "$t" = device_train_test ] && secs=240
    if ! run_timeout $secs "$log" "$BIN/$t" --gtest_brief=1; then result FAIL "$t"; continue; fi
    local ran skipped
    ran=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    skipped=$(grep -Eo '\[  SKIPPED \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' | head -1 || true)
    skipped=${skipped:-0}
    if [ "$GPU" = 1 ] && [ "$skipped" != 0 ]; then
      result FAIL "$t: $skipped tests skipped on a GPU: $(grep -E '^\[  SKIPPED \] [A-Z]' "$log" | head -3 | tr '\n' ' ')"
    else
      result PASS "$t ($ran passed, $skipped skipped$([ "$GPU" = 0 ] && echo ': no GPU here'))"
    fi
  done
  if [ "$GPU" = 1 ]; then
    echo "per-layer GPU vs CPU (relative errors against the CPU's fp32 layer, bounds of tests/worker/layers):"
    grep -h '\[ gpu-vs-cpu \]' "$WORK/device_layers_test.log" | sed 's/^\[ gpu-vs-cpu \] /  /'
    [ -n "$(grep -h '\[ gpu-vs-cpu \]' "$WORK/device_layers_test.log")" ] && result PASS "3 per-layer table (device_layers_test)" || result FAIL "3 per-layer table missing"
  else
    result SKIP "3 per-layer GPU-vs-CPU table: needs a GPU"
  fi
}

# train LOG JSON device_class args...: one training run, its summary JSON.
train() {
  local log=$1 json=$2 cls=$3; shift 3
  run_timeout 240 "$log" "$BIN/qsync-worker" train --device-class "$cls" --threads "${GPU_THREADS:-$THREADS}" --quiet \
    --summary-json "$json" "$@"
}

curves() {  # curves cpu.json gpu.json every: the two loss curves side by side
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a, b, every = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
la, lb = a["losses"], b["losses"]
print(f"  {'step':>5} {'cpu ' + a['device_class']:>16} {'gpu ' + b['device_class']:>16}")
for i in range(0, len(la), every):
    print(f"  {i + 1:>5} {la[i]:>16.4f} {lb[i] if i < len(lb) else float('nan'):>16.4f}")
print(f"  final {la[-1]:>16.4f} {lb[-1]:>16.4f}   test accuracy {a['final_test_accuracy']:.3f} / {b['final_test_accuracy']:.3f}")
PY
}

check_training() {
  in_budget "4 training" || return 0
  section "4 training: the GPU beside the CPU (same seed)"
  local steps=200 fp32_steps=50
  [ "$GPU" = 0 ] && steps=20 fp32_steps=10
  cat >"$WORK/cnn-mixed.plan.yaml" <<'EOF'
model: cnn-fmnist
default: bf16
layers:
  conv1: fp32
  conv2: int8
  fc1: fp8
  fc2: int8-all
EOF
  cat >"$WORK/gpt-mixed.plan.yaml" <<'EOF'
model: char-gpt
default: bf16
layers:
  blocks.0.attn.qkv: int8
  blocks.1.mlp.fc1: fp8
  blocks.2.mlp.fc2: int8-all
  blocks.3.attn.proj: tf32
  head: fp32
EOF
  # The CPU classes refuse tf32 (a GPU tensor-core mode): their copy of the plan says fp32 there.
  sed 's/tf32/fp32/' "$WORK/gpt-mixed.plan.yaml" >"$WORK/gpt-mixed.cpu.plan.yaml"
  local m
  # The CPU runs go in the background, beside the GPU's (which need few cores).
  (
    for m in cnn char-gpt; do
      local cplan=$WORK/cnn-mixed.plan.yaml
      [ $m = char-gpt ] && cplan=$WORK/gpt-mixed.cpu.plan.yaml
      # shellcheck disable=SC2046
      train "$WORK/$m.cpu.log" "$WORK/$m.cpu.json" $CPU_CLASS $(common_args $m) --steps $steps --plan "$cplan"
      if [ "$GPU" = 1 ]; then
        # shellcheck disable=SC2046
        train "$WORK/$m.cpu32.log" "$WORK/$m.cpu32.json" $CPU_CLASS $(common_args $m) --steps $fp32_steps --precision fp32
      fi
    done
  ) &
  local cpu_pid=$!
  for m in cnn char-gpt; do
    local plan=$WORK/cnn-mixed.plan.yaml
    [ $m = char-gpt ] && plan=$WORK/gpt-mixed.plan.yaml
    if [ "$GPU" = 0 ]; then
      # shellcheck disable=SC2046
      if "$BIN/qsync-worker" train --device-class $GPU_CLASS $(common_args $m) --steps 1 >"$WORK/$m.gpu.log" 2>&1; then
        result FAIL "$m on $GPU_CLASS without a GPU did not refuse"
      elif grep -q "$GPU_CLASS" "$WORK/$m.gpu.log" && grep -qi "cuda" "$WORK/$m.gpu.log"; then
        result PASS "$m on $GPU_CLASS without a GPU refuses: $(grep -o 'error: .*' "$WORK/$m.gpu.log" | head -1 | cut -c1-150)"
      else
        result FAIL "$m on $GPU_CLASS: unclear refusal: $(tail -1 "$WORK/$m.gpu.log")"
      fi
      continue
    fi
    # shellcheck disable=SC2046
    GPU_THREADS=4 train "$WORK/$m.gpu.log" "$WORK/$m.gpu.json" $GPU_CLASS $(common_args $m) --steps $steps --plan "$plan" ||
      result FAIL "$m mixed plan on $GPU_CLASS"
    # shellcheck disable=SC2046
    GPU_THREADS=4 train "$WORK/$m.gpu32.log" "$WORK/$m.gpu32.json" $GPU_CLASS $(common_args $m) --steps $fp32_steps \
      --precision fp32 || result FAIL "$m fp32 on $GPU_CLASS"
  done
  wait $cpu_pid
  for m in cnn char-gpt; do
    [ -f "$WORK/$m.cpu.json" ] || { result FAIL "$m mixed plan on $CPU_CLASS (see $WORK/$m.cpu.log)"; continue; }
    if [ "$GPU" = 0 ]; then
      echo "$m (dry: the CPU run beside itself, to run the report code)"
      curves "$WORK/$m.cpu.json" "$WORK/$m.cpu.json" 5
      result PASS "$m mixed plan on $CPU_CLASS, $steps steps (the CPU half)"
      continue
    fi
    [ -f "$WORK/$m.gpu.json" ] || continue
    echo "$m, mixed plan ($(json_field "$WORK/$m.gpu.json" "['plan']"))"
    curves "$WORK/$m.cpu.json" "$WORK/$m.gpu.json" 25
    local learned
    learned=$(python3 -c "import json;d=json.load(open('$WORK/$m.gpu.json'))['losses'];print(int(d[-1]<d[0]*0.8))")
    [ "$learned" = 1 ] && result PASS "$m mixed plan on the GPU learns" || result FAIL "$m mixed plan on the GPU does not learn"
    [ -f "$WORK/$m.cpu32.json" ] && [ -f "$WORK/$m.gpu32.json" ] || { result FAIL "$m fp32 runs"; continue; }
    local worst
    worst=$(python3 -c "
import json
a=json.load(open('$WORK/$m.cpu32.json'))['losses']; b=json.load(open('$WORK/$m.gpu32.json'))['losses']
print(max(abs(x-y)/abs(x) for x,y in zip(a,b)))")
    if python3 -c "import sys; sys.exit(0 if $worst <= 1e-3 else 1)"; then
      result MET "$m fp32 GPU vs CPU over $fp32_steps steps: largest relative loss difference $worst (target 1e-3)"
    else
      result MISSED "$m fp32 GPU vs CPU over $fp32_steps steps: largest relative loss difference $worst (target 1e-3)"
    fi
  done
}

# common_args MODEL: the training flags the CPU and the GPU runs of MODEL share.
common_args() {
  if [ "$1" = cnn ]; then echo "--model cnn --data $DATA/fashion-mnist --batch 128 --seed 3 --eval-limit 1000 --lr 1e-3"
  else echo "--model char-gpt --data $DATA/corpus.txt --batch 32 --seed 3 --eval-limit 1000 --lr 1e-3"; fi
}

check_gemm() {
  in_budget "5 GEMM throughput" || return 0
  section "5 GEMM throughput (8192^3, the engine's cuBLASLt wrapper)"
  if [ "$GPU" = 0 ]; then result SKIP "5 GEMM TFLOP/s: needs a GPU"; return; fi
  run_timeout 120 "$WORK/gemm.log" "$BIN/qsync-worker" devices --bench --size 8192 --iterations 20 --json "$WORK/gemm.json" ||
    { result FAIL "GEMM benchmark"; return; }
  cat "$WORK/gemm.log"
  python3 - "$WORK/gemm.json" <<'PY' | targets
import json, sys
dev = json.load(open(sys.argv[1]))["devices"][0]
t = {g["precision"]: g for g in dev.get("gemm", [])}
bf = t.get("bf16", {}).get("tflops", 0)
def say(ok, text): print(("[MET]    " if ok else "[MISSED] ") + text)
if bf:
    say(bf >= 0.6 * t["bf16"]["peak_tflops"], f"bf16 {bf:.0f} TFLOP/s = {100 * bf / t['bf16']['peak_tflops']:.0f}% of peak (target 60%)")
for p in ("int8", "fp8-e4m3"):
    if p in t and bf:
        say(t[p]["tflops"] >= 1.6 * bf, f"{p} {t[p]['tflops']:.0f} = {t[p]['tflops'] / bf:.2f}x bf16 (target 1.6x)")
PY
  result PASS "5 GEMM benchmark ran"
}

check_profile() {
  in_budget "6a measured profile" || return 0
  section "6a a measured profile of this GPU, and the prediction it makes"
  local cls=$GPU_CLASS model=cnn batch=128 data=$DATA/fashion-mnist
  [ "$GPU" = 0 ] && cls=$CPU_CLASS model=mlp batch=64  # dry: the same commands on the CPU
  mkdir -p "$WORK/profiles"
  if ! run_timeout 120 "$WORK/profile.log" "$BIN/qsync-worker" profile --model $model --device-class $cls --batch $batch \
      --threads "$THREADS" --out "$WORK/profiles/$model.$cls.profile.json"; then
    result FAIL "qsync-worker profile --model $model --device-class $cls"; return
  fi
  tail -3 "$WORK/profile.log" | sed 's/^/  /'
  if ! train "$WORK/profiled.log" "$WORK/profiled.json" $cls --model $model --data "$data" --batch $batch --steps 30 \
      --precision bf16 --eval-limit 64 --profiles "$WORK/profiles"; then
    result FAIL "training $model with the measured profile"; return
  fi
  python3 - "$WORK/profiled.json" <<'PY' | targets
import json, sys
s = json.load(open(sys.argv[1]))
m, p = s["median_compute_seconds"], s["predicted_compute_seconds"]
peak = s["device_peak_bytes"] or s["peak_memory_bytes"]
print(f"  compute per step: measured {m * 1e3:.2f} ms, predicted from the measured profile {p * 1e3:.2f} ms"
      f"; peak memory {peak / 2**20:.1f} MiB, predicted {s['predicted_peak_memory_bytes'] / 2**20:.1f} MiB")
ok = p > 0 and abs(m / p - 1) <= 0.25
print(("[MET]    " if ok else "[MISSED] ") + "the measured profile predicts the step's compute within 25%")
PY
  result PASS "6a measured profile of $model on $cls written and used (planner/ProfileStore)"
}

check_gpt() {
  in_budget "6/7 gpt-768 step time and memory" || return 0
  section "6 gpt-768 step time against PyTorch eager; 7 peak memory against the prediction"
  local batch=16 steps=15 cls=$GPU_CLASS modes=(fp32 tf32 bf16)
  # Dry: two fp32 steps of batch 1 on the CPU run the model file and the report code.
  [ "$GPU" = 0 ] && batch=1 steps=2 cls=$CPU_CLASS modes=(fp32)
  local ours=()
  for p in "${modes[@]}"; do
    if train "$WORK/gpt768.$p.log" "$WORK/gpt768.$p.json" $cls --model gpt-768 --data "$DATA/corpus.txt" \
        --batch $batch --steps $steps --precision $p --eval-limit 64; then
      ours+=("$p $(json_field "$WORK/gpt768.$p.json" "['median_step_seconds']")")
    else
      result FAIL "gpt-768 $p on $cls"
    fi
  done
  if [ "$GPU" = 0 ]; then
    [ ${#ours[@]} = 1 ] && result PASS "6 gpt-768 trains on $cls (${ours[0]} s/step at batch 1; the GPU comparison needs a GPU)"
    python3 -c 'import torch' 2>/dev/null || result SKIP "6 PyTorch eager baseline: PyTorch is not importable here"
    result SKIP "7 peak device memory: needs a GPU"
    return
  fi
  local theirs=()
  for p in "${modes[@]}"; do
    if run_timeout 150 "$WORK/torch.$p.log" python3 "$ROOT/scripts/gpu_check_torch_step.py" --model gpt-768 \
        --batch $batch --mode $p --steps $steps; then
      theirs+=("$p $(tail -1 "$WORK/torch.$p.log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_ms"] / 1e3)')")
    else
      result FAIL "PyTorch gpt-768 $p"
    fi
  done
  python3 - "${ours[*]:-}" "${theirs[*]:-}" <<'PY' | targets
import sys
def parse(s):
    w = s.split(); return {w[i]: float(w[i + 1]) for i in range(0, len(w) - 1, 2)}
o, t = parse(sys.argv[1]), parse(sys.argv[2])
print(f"  {'mode':6} {'QSync ms':>10} {'PyTorch ms':>11} {'speed-up':>9}")
for m in ("fp32", "tf32", "bf16"):
    if m in o and m in t:
        print(f"  {m:6} {o[m] * 1e3:>10.1f} {t[m] * 1e3:>11.1f} {t[m] / o[m]:>8.2f}x")
if "bf16" in o and "bf16" in t:
    r = t["bf16"] / o["bf16"]
    print(("[MET]    " if r >= 1.0 else "[MISSED] ") + f"bf16 step {r:.2f}x PyTorch eager's with autocast (target 1.0x, goal 1.3x)")
PY
  if [ -f "$WORK/gpt768.bf16.json" ]; then
    python3 - "$WORK/gpt768.bf16.json" <<'PY' | targets
import json, sys
s = json.load(open(sys.argv[1]))
m, p = s["device_peak_bytes"], s["predicted_peak_memory_bytes"]
if p > 0:
    r = m / p
    print(f"  peak device memory {m / 2**20:.0f} MiB (pool high-water mark), accounted {s['peak_memory_bytes'] / 2**20:.0f} MiB, "
          f"predicted {p / 2**20:.0f} MiB: {r:.2f}x")
    print(("[MET]    " if abs(r - 1) <= 0.1 else "[MISSED] ") + "peak memory within 10% of the prediction")
else:
    print("[MISSED] no prediction for this class")
PY
    result PASS "7 peak memory reported"
  fi
}

check_mixed_job() {
  in_budget "8 the 2-rank job" || return 0
  section "8 a 2-rank job: one GPU rank and one CPU rank"
  local steps=100 cls0=$GPU_CLASS
  [ "$GPU" = 0 ] && steps=10 cls0=$CPU_CLASS  # dry: two CPU ranks exercise the same plumbing
  local port=$((29500 + RANDOM % 400)) args=(--model mlp --data "$DATA/fashion-mnist" --batch 128 --steps $steps --seed 5
    --precision int8 --weight-hash-every 10 --eval-limit 500 --collective-timeout 120)
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=0 timeout 240 "$BIN/qsync-worker" train --device-class $cls0 \
    --threads "$THREADS" --quiet --summary-json "$WORK/job.0.json" "${args[@]}" >"$WORK/job.0.log" 2>&1 &
  local pid=$!
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=1 timeout 240 "$BIN/qsync-worker" train --device-class $CPU_CLASS \
    --threads "$THREADS" --quiet --summary-json "$WORK/job.1.json" "${args[@]}" >"$WORK/job.1.log" 2>&1
  local rc1=$? rc0=0
  wait $pid || rc0=$?
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    result FAIL "2-rank job (rank 0 exit $rc0, rank 1 exit $rc1)"; tail -5 "$WORK/job.0.log" "$WORK/job.1.log"; return
  fi
  local h0 h1
  h0=$(json_field "$WORK/job.0.json" "['weight_hash']") h1=$(json_field "$WORK/job.1.json" "['weight_hash']")
  echo "  rank 0 $cls0: loss $(json_field "$WORK/job.0.json" "['final_train_loss']"), $(json_field "$WORK/job.0.json" "['median_step_seconds']") s/step, allreduce $(json_field "$WORK/job.0.json" "['median_allreduce_seconds']") s"
  echo "  rank 1 $CPU_CLASS: $(json_field "$WORK/job.1.json" "['median_step_seconds']") s/step, wait $(json_field "$WORK/job.1.json" "['median_wait_seconds']") s"
  [ "$h0" = "$h1" ] && result PASS "2-rank job: weights equal on both ranks (checked every 10 steps; hash $h0)" ||
    result FAIL "2-rank job: weight hashes differ ($h0 vs $h1)"
}

summary() {
  section "summary"
  printf '%s\n' "${RESULTS[@]}"
  echo "$PASSES passed, $FAILS failed, in ${SECONDS}s$([ "$dry" = 1 ] && echo ' (dry run: no GPU)')"
}

case "$mode" in
  prepare)
    prepare
    if [ "$dry" = 1 ]; then
      setup_run
      check_versions; check_unit_tests; check_training; check_gemm; check_profile; check_gpt; check_mixed_job
    fi
    summary ;;
  run)
    setup_run
    check_versions; check_unit_tests; check_training; check_gemm; check_profile; check_gpt; check_mixed_job
    summary ;;
esac
exit $FAILS
