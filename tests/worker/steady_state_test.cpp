// Steady-state allocation of the training engine: after the warm-up steps a step reuses the
// activation and workspace buffers of the steps before it, so it takes (almost) no minor page
// faults (getrusage over 100 steps, as train_run reports it in its summary). Before buffers were
// reused, the CNN took about 300 faults a step at batch 128 and about 16 at batch 16.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "worker/tensor.h"
#include "worker/trainer.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // <linux/mman.h>; older headers lack the name
#endif

namespace qsync {
namespace {

// One run in a forked child (a worker process per run, as in production: no other run's heap or
// cached blocks in the way); its summary JSON.
nlohmann::json train_steps(const std::string& model, const std::string& precision, int64_t batch) {
  TrainConfig c;
  c.model = model;
  c.precision = precision;
  c.steps = STEADY_STATE_WARMUP_STEPS + 100;
  c.batch = batch;
  c.threads = 1;
  c.eval_limit = 10;
  c.quiet = true;
  c.summary_json = ::testing::TempDir() + "/steady-state-" + model + "-" + precision + ".json";
  std::filesystem::remove(c.summary_json);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      train_run(c);
      _exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train_run: %s\n", e.what());
      _exit(1);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(c.summary_json);
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// Steady state: a per-step allocation of any activation faults in every step, at least once per
// 4 KiB page it touches (hundreds a step). Two residues used to remain, both found with perf
// (minor-fault samples with call stacks): oneDNN's INT8 GEMM allocates its packing buffers on
// every call, and they landed deeper in the heap's never-touched top as the live set shifted
// (the INT8 MLP: about 1.2-1.8 faults a step in 7 steps of 100), and the data loader reallocated
// its epoch permutation at each epoch boundary. The trainer now touches 16 MiB of heap headroom
// (and the heap's holes) after any step that faulted and the loader refills one buffer: measured
// 0.0 faults a step in 0 of 100 steps on all 16 model x precision runs of cpu-avx2 at 1 thread
// (AMD EPYC, AVX2). Run by this test under the parallel suite, the INT8-all CNN took 0.06 a step
// in 2 steps. The bounds leave that slack, not the old one: a step may fault in a few
// of the 100 steps (the heap's high-water mark can still move once or twice, faulting up to a
// few pages each time).
constexpr int64_t MAX_STEPS_WITH_FAULTS = 5;
// The average over the 100 steps, loosely (25x the worst measured): hundreds a step fail it by far.
constexpr double MAX_FAULTS_PER_STEP = 1.5;

void expect_steady(const nlohmann::json& s) {
  EXPECT_GE(s.value("steady_steps_with_page_faults", int64_t(-1)), 0) << s.dump();
  EXPECT_LE(s.value("steady_steps_with_page_faults", int64_t(-1)), MAX_STEPS_WITH_FAULTS) << s.dump();
  EXPECT_GE(s.value("steady_minor_page_faults_per_step", -1.0), 0.0) << s.dump();
  EXPECT_LT(s.value("steady_minor_page_faults_per_step", -1.0), MAX_FAULTS_PER_STEP) << s.dump();
}

int64_t thread_minor_faults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return int64_t(u.ru_minflt);
}

// A heap block carved after host_heap_prefault lands on pages it wrote: touching every page of
// one 8 MiB block (half the headroom) takes no fault on this thread. Without the prefault (a
// child forked before it, so none of its pages are there) the same block takes about one fault
// per page (2048): the control shows that the count would see them.
TEST(SteadyState, HeapPrefaultLeavesTouchedPagesForTheNextBlocks) {
  constexpr size_t BLOCK = size_t(8) << 20;
  auto touch_fresh_block = [] {
    char* p = static_cast<char*>(std::malloc(BLOCK));
    const int64_t before = thread_minor_faults();
    for (size_t i = 0; i < BLOCK; i += 4096) p[i] = 1;
    asm volatile("" : : "r"(p) : "memory");
    const int64_t faults = thread_minor_faults() - before;
    std::free(p);
    return faults;
  };
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {  // control: no prefault
    const int64_t faults = touch_fresh_block();
    _exit(write(pipe_fds[1], &faults, sizeof faults) == sizeof faults ? 0 : 1);
  }
  int64_t control = -1;
  ASSERT_EQ(read(pipe_fds[0], &control, sizeof control), ssize_t(sizeof control));
  waitpid(pid, nullptr, 0);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_GT(control, 1000) << "a fresh 8 MiB heap block should fault in about 2048 pages";
  host_heap_prefault(HOST_HEAP_HEADROOM_BYTES);
  EXPECT_EQ(touch_fresh_block(), 0);
}

// A thread arena's holes. On the second thread of a team of two (its own glibc arena), four 2 MiB
// blocks, each followed by a live page, are freed: holes of pages nobody wrote, smaller than the
// prefault's 4 MiB blocks, so those come from the top and never write them (the CNN's INT8-all
// steps at 2 threads faulted there, 0.36-0.65 a step, until the prefault populated the thread's
// heap too). Blocks of the same size carved again on that thread land in the holes and fault in
// every page (the control, no prefault: about 2048) unless host_heap_prefault ran between.
// Each arm runs in a fresh process (a death test re-executed as a new process: libgomp's threads
// do not survive a plain fork), which exits 0 when its count is within [lo, hi] and prints it.
void exit_with_thread_arena_hole_faults(bool prefault, int64_t lo, int64_t hi) {
  constexpr size_t HOLE = size_t(2) << 20;
  constexpr int HOLES = 4;
  (void)Tensor::empty({1}, Precision::FP32, nullptr, "heap settings");  // the worker's mallopt settings
  omp_set_num_threads(2);
  int64_t faults = -1;
  long first_tid = 0, second_tid = 0;
#pragma omp parallel
  if (omp_get_thread_num() == 1) {
    first_tid = syscall(SYS_gettid);
    char* holes[HOLES];
    for (char*& h : holes) {
      h = static_cast<char*>(std::malloc(HOLE));
      char* pin = static_cast<char*>(std::malloc(4096));  // kept: the hole stays a hole
      pin[0] = 1;
      asm volatile("" : : "r"(pin) : "memory");
    }
    for (char* h : holes) std::free(h);
  }
  if (prefault) host_heap_prefault(HOST_HEAP_HEADROOM_BYTES);
#pragma omp parallel
  if (omp_get_thread_num() == 1) {
    second_tid = syscall(SYS_gettid);
    char* blocks[HOLES];
    for (char*& b : blocks) b = static_cast<char*>(std::malloc(HOLE));
    const int64_t before = thread_minor_faults();
    for (char* b : blocks)
      for (size_t i = 0; i < HOLE; i += 4096) b[i] = 1;
    asm volatile("" : : "r"(blocks) : "memory");
    faults = thread_minor_faults() - before;
    for (char* b : blocks) std::free(b);
  }
  const bool same_thread = first_tid != 0 && first_tid == second_tid;
  std::fprintf(stderr, "%s: %lld faults (want %lld..%lld)%s\n", prefault ? "prefaulted" : "control",
               static_cast<long long>(faults), static_cast<long long>(lo), static_cast<long long>(hi),
               same_thread ? "" : "; libgomp gave the team's second place to another thread");
  std::_Exit(same_thread && faults >= lo && faults <= hi ? 0 : 1);
}

TEST(SteadyState, HeapPrefaultPopulatesTheHolesOfAThreadsArena) {
  std::vector<char> page(8192);
  char* aligned = page.data() + (4096 - reinterpret_cast<uintptr_t>(page.data()) % 4096) % 4096;
  if (madvise(aligned, 4096, MADV_POPULATE_WRITE) != 0) GTEST_SKIP() << "madvise(MADV_POPULATE_WRITE): Linux 5.14+";
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string thp_mode;
  std::getline(thp, thp_mode);
  if (thp_mode.find("[always]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages always on: a hole faults in a few huge pages, not its 4 KiB pages";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // About 2048 (4 x 2 MiB of 4 KiB pages): the count sees them.
  EXPECT_EXIT(exit_with_thread_arena_hole_faults(false, 1001, 1 << 20), ::testing::ExitedWithCode(0), "control");
  EXPECT_EXIT(exit_with_thread_arena_hole_faults(true, 0, 0), ::testing::ExitedWithCode(0), "prefaulted");
}

TEST(SteadyState, CnnStepsTakeNoPageFaults) {
  const nlohmann::json s = train_steps("cnn", "fp32", 16);
  expect_steady(s);
  EXPECT_GT(s.value("first_step_minor_page_faults", 0), 0) << "the first step does touch fresh memory";
}

// The im2col path (INT8 gradients) and the GEMM backend's operand copies (thread buffers).
TEST(SteadyState, Int8AllCnnStepsTakeNoPageFaults) { expect_steady(train_steps("cnn", "int8-all", 16)); }

TEST(SteadyState, Int8MlpStepsTakeNoPageFaults) { expect_steady(train_steps("mlp", "int8-all", 128)); }

}  // namespace
}  // namespace qsync
