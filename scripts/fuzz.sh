#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan into build-fuzz/ (CUDA
# off, only the fuzz targets and what they need) and runs each for SECONDS on its seeds; prints a
# table: target, executions, corpus size, crashes. Inputs that crash land in
# build-fuzz/fuzz/artifacts/; the corpora grow in build-fuzz/fuzz/corpus/ and are kept between runs.
# Usage: scripts/fuzz.sh [SECONDS (default 60)] [TARGET_REGEX (default all)]
#   QSYNC_FUZZ_BUILD_DIR (default build-fuzz), QSYNC_BUILD_JOBS (default nproc), QSYNC_FUZZ_JOBS
#   (targets run at once, default 2), QSYNC_FUZZ_SEED (libFuzzer's -seed; default 0: a new draw
#   each run, to search; scripts/test.sh fixes it, so CI repeats the same inputs and turns red
#   on a change, not on a lucky draw).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
filter=${2:-.*}
dir=${QSYNC_FUZZ_BUILD_DIR:-build-fuzz}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found: run scripts/install-deps.sh (clang, libclang-rt-dev, llvm)" >&2
  exit 1
fi
launcher=()
if command -v ccache >/dev/null 2>&1 && [ -z "${QSYNC_NO_CCACHE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DQSYNC_ENABLE_CUDA=OFF -DQSYNC_BUILD_FUZZERS=ON -DQSYNC_BUILD_BENCH=OFF -DQSYNC_WERROR=OFF \
  -DQSYNC_FUZZ_SECONDS="$seconds" -DQSYNC_FUZZ_SEED="${QSYNC_FUZZ_SEED:-0}" "${launcher[@]}" >/dev/null
nice -n 10 cmake --build "$dir" -j "${QSYNC_BUILD_JOBS:-$(nproc)}" --target qsync_fuzzers
log="$dir/fuzz/last-run.log"
mkdir -p "$dir/fuzz"
status=0
(cd "$dir" && nice -n 10 ctest -V -L fuzz -R "^fuzz\.(seeds|${filter})\$" -j "${QSYNC_FUZZ_JOBS:-2}") >"$log" 2>&1 || status=$?
# ctest -V prefixes each test's output with its number: map numbers to names, then read
# libFuzzer's final stats and crash lines.
python3 - "$log" <<'PY'
import re, sys
name, execs, added, crashes, found = {}, {}, {}, {}, {}
bad = re.compile(r"ERROR: AddressSanitizer|ERROR: libFuzzer|runtime error:|unclear error escaped|error without a cause|deadly signal")
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^(\d+): (.*)", line)
    if not m:
        continue
    n, text = m.groups()
    if t := re.match(r"Test command: \S*qsync-fuzz-(\w+) ", text):
        name[n] = t.group(1)
    elif t := re.match(r"stat::number_of_executed_units:\s+(\d+)", text):
        execs[n] = t.group(1)
    elif t := re.match(r"stat::new_units_added:\s+(\d+)", text):
        added[n] = t.group(1)
    elif bad.search(text) or text.startswith("Base64: "):
        # The crash lines and the input (base64) go to stdout too: CI keeps its output, not the
        # clone's build-fuzz/, so a finding there can be replayed from the log alone.
        found.setdefault(n, []).append(text.rstrip()[:400])
        if not text.startswith("Base64: "):
            crashes[n] = crashes.get(n, 0) + 1
print(f"{'target':22} {'executions':>12} {'new units':>10} {'crash lines':>12}")
for n in sorted(name, key=lambda k: name[k]):
    print(f"{name[n]:22} {execs.get(n, '-'):>12} {added.get(n, '-'):>10} {crashes.get(n, 0):>12}")
for n in sorted(found, key=lambda k: name.get(k, k)):
    print(f"\n{name.get(n, n)}: what it printed (replay: echo BASE64 | base64 -d > crash; qsync-fuzz-{name.get(n, n)} crash)")
    for line in found[n]:
        print("  " + line)
PY
if [ "$status" -ne 0 ]; then
  grep -E "Failed|\*\*\*" "$log" | grep -v "^ *[0-9]*: " || true
  echo "fuzz.sh: a target failed: see $log and $dir/fuzz/artifacts/" >&2
fi
exit "$status"
