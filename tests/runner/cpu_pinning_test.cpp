// Tests of runner/cpu_pinning: disjoint CPU sets per rank, the note when they do not fit, CPU
// list formatting, and pinning a real (forked) process.
#include "runner/cpu_pinning.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace qsync {
namespace {

TEST(CpuPinning, RanksGetDisjointSetsInOrder) {
  const CpuAssignment a = assign_rank_cpus({1, 2, 1}, {0, 1, 2, 3, 4});
  ASSERT_EQ(a.per_rank.size(), 3u);
  EXPECT_EQ(a.per_rank[0], std::vector<int>({0}));
  EXPECT_EQ(a.per_rank[1], std::vector<int>({1, 2}));
  EXPECT_EQ(a.per_rank[2], std::vector<int>({3}));
  EXPECT_TRUE(a.note.empty());
}

TEST(CpuPinning, FollowsTheAvailableCpusNotTheirNumbers) {
  const CpuAssignment a = assign_rank_cpus({1, 1}, {2, 5});
  ASSERT_EQ(a.per_rank.size(), 2u);
  EXPECT_EQ(a.per_rank[0], std::vector<int>({2}));
  EXPECT_EQ(a.per_rank[1], std::vector<int>({5}));
}

TEST(CpuPinning, ZeroThreadsCountAsOne) {
  const CpuAssignment a = assign_rank_cpus({0, 1}, {0, 1});
  ASSERT_EQ(a.per_rank.size(), 2u);
  EXPECT_EQ(a.per_rank[0], std::vector<int>({0}));
}

TEST(CpuPinning, TooManyThreadsPinNothingAndSayWhy) {
  const CpuAssignment a = assign_rank_cpus({2, 2}, {0, 1, 2});
  EXPECT_TRUE(a.per_rank.empty());
  EXPECT_NE(a.note.find("asks for 4 threads"), std::string::npos) << a.note;
  EXPECT_NE(a.note.find("3 CPUs (0-2)"), std::string::npos) << a.note;
  EXPECT_NE(a.note.find("threads"), std::string::npos) << a.note;
}

TEST(CpuPinning, CpuListStringCompressesRuns) {
  EXPECT_EQ(cpu_list_string({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(cpu_list_string({1}), "1");
  EXPECT_EQ(cpu_list_string({0, 2, 3}), "0,2-3");
  EXPECT_EQ(cpu_list_string({}), "none");
}

TEST(CpuPinning, PinsAProcessToOneOfItsCpus) {
  const std::vector<int> cpus = affinity_cpus();
  ASSERT_FALSE(cpus.empty());
  const pid_t pid = fork();
  if (pid == 0) {  // the child pins itself to its last CPU and checks
    try {
      pin_to_cpus({cpus.back()});
    } catch (...) {
      _exit(2);
    }
    _exit(affinity_cpus() == std::vector<int>({cpus.back()}) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(affinity_cpus(), cpus);  // the parent is untouched
}

TEST(CpuPinning, OutOfRangeCpuIsAClearError) {
  try {
    pin_to_cpus({-1});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU -1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qsync
