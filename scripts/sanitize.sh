#!/usr/bin/env bash
# Builds unit tests with sanitizers (clang, CUDA off, only the test targets named) and runs them:
#   asan  ASan+UBSan in build-fuzz/ (the build scripts/fuzz.sh uses: one instrumented copy of the
#         libraries serves both), halting on the first report;
#   tsan  ThreadSanitizer in build-tsan/: the concurrent code (the rendezvous store and Gloo
#         collectives, the worker's communication thread and gradient buckets through
#         data_parallel_test's qsync-worker ranks, the operator's informers, work queue,
#         controllers, leader election, HTTP server and watch client).
# Usage: scripts/sanitize.sh [asan|tsan|all (default)] [GTEST_FILTER (default: every test of the set)]
#   QSYNC_SANITIZE_ASAN_TESTS / QSYNC_SANITIZE_TSAN_TESTS: space-separated test targets to build
#   (default: the lists below; "all" builds every test, which takes long on a small machine).
#   QSYNC_BUILD_JOBS (default nproc). Logs: <build dir>/sanitize-<kind>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
regex=${2:-}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "sanitize.sh: clang++ not found: run scripts/install-deps.sh (clang, libclang-rt-dev, libomp-dev, llvm)" >&2
  exit 1
fi
# Readers, formats, the rendezvous store, checkpoints, and the operator's parsing and clients.
asan_tests=${QSYNC_SANITIZE_ASAN_TESTS:-"model_desc_test plan_file_test job_spec_test layer_precision_test
  device_profile_test indicator_test spd_plan_test replayer_test allocator_test precision_test float_convert_test
  onnx_graph_test quantize_test kv_store_test rendezvous_test collectives_test checkpoint_test optimizer_test
  hybrid_training_job_test http_server_test kube_config_test kube_error_test kube_watch_test kube_client_server_test
  work_queue_test informer_test informer_server_test controller_test json_patch_test label_selector_test
  lending_window_test operator_flags_test rendezvous_network_faults_test kueue_workload_test"}
# What runs threads: store, collectives, multi-process data parallelism (communication thread and
# gradient buckets inside every qsync-worker rank), informers, work queue, controllers.
tsan_tests=${QSYNC_SANITIZE_TSAN_TESTS:-"kv_store_test rendezvous_test collectives_test data_parallel_test
  work_queue_test rate_limiter_test informer_test informer_server_test controller_test manager_test
  leader_election_test http_server_test health_server_test kube_watch_test kube_client_server_test token_bucket_test
  rendezvous_network_faults_test"}
launcher=()
if command -v ccache >/dev/null 2>&1 && [ -z "${QSYNC_NO_CCACHE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
common=(-G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" -DQSYNC_ENABLE_CUDA=OFF -DQSYNC_BUILD_BENCH=OFF
  -DQSYNC_WERROR=OFF "${launcher[@]}")
status=0

run_kind() {
  local kind=$1 dir=$2 tests=$3
  shift 3
  cmake -S . -B "$dir" "${common[@]}" "$@" >/dev/null
  local targets=()
  if [ "$tests" = all ]; then
    targets=(--target all)
  else
    for t in $tests; do targets+=(--target "$t"); done
  fi
  nice -n 10 cmake --build "$dir" -j "${QSYNC_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
  if [ "$tests" = all ]; then
    tests=$(cd "$dir/tests" && ls)
  fi
  mkdir -p "$dir/sanitize-logs"
  echo "sanitize.sh: $kind: running $(echo $tests | wc -w) test binaries (logs: $dir/sanitize-logs/)"
  # Each gtest binary on its own (a regex narrows the tests inside), two at a time, 15 min each at most.
  for t in $tests; do echo "$t"; done |
    xargs -P "${QSYNC_TEST_JOBS:-2}" -I{} sh -c 'if timeout 900 nice -n 10 "$1/tests/$2" --gtest_brief=1 ${3:+--gtest_filter="$3"} \
        >"$1/sanitize-logs/$2.log" 2>&1; then echo "  pass $2"; else echo "  FAIL $2 (exit $?)"; fi' _ "$dir" {} "$regex" |
    tee "$dir/sanitize-$kind.log"
  grep -q FAIL "$dir/sanitize-$kind.log" && status=1
  # The reports, counted by kind and place.
  grep -hE "^(SUMMARY: [A-Za-z]+Sanitizer|.*runtime error:)" "$dir"/sanitize-logs/*.log | sort | uniq -c | sort -rn | head -30 || true
}

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
if [ "$which" = asan ] || [ "$which" = all ]; then
  # Leak checking off: the tests fork children that exit without unwinding (and oneDNN caches).
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" run_kind asan build-fuzz "$asan_tests" -DQSYNC_BUILD_FUZZERS=ON
fi
if [ "$which" = tsan ] || [ "$which" = all ]; then
  # libomp is not instrumented: one OpenMP thread per process keeps its regions out of the picture.
  # tests/sanitize/tsan_suppressions.txt: what TSan cannot see into (uninstrumented cpprestsdk).
  OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$PWD/tests/sanitize/tsan_suppressions.txt" \
    run_kind tsan build-tsan "$tsan_tests" -DQSYNC_SANITIZE=thread
fi
exit "$status"
