// File: tests/operator/api/crd_agreement_test.cpp
// The committed CRD YAML is the generator's current output, and the Helm chart's copy is
// byte-identical to it: one source for the types, crds/ and charts/qsync/crds/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "operator/api/crd_schema.h"

namespace qsync::api {
namespace {

const std::filesystem::path SOURCE_DIR = QSYNC_SOURCE_DIR;
const char* CRD_FILE = "crds/qsync.dev_hybridtrainingjobs.yaml";
const char* CHART_CRD_FILE = "charts/qsync/crds/qsync.dev_hybridtrainingjobs.yaml";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first line where two texts differ, for the failure message.
std::string first_difference(const std::string& a, const std::string& b, const std::string& name_a,
                             const std::string& name_b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(sa, la));
    const bool more_b = static_cast<bool>(std::getline(sb, lb));
    if (!more_a && !more_b) return "(same lines; line endings differ)";
    if (!more_a || !more_b || la != lb)
      return "line " + std::to_string(line) + ":\n  " + name_a + ": " + (more_a ? la : "<end>") + "\n  " + name_b + ": " +
             (more_b ? lb : "<end>");
  }
}

TEST(CrdAgreement, CommittedCrdIsTheGeneratorsOutput) {
  const std::filesystem::path path = SOURCE_DIR / CRD_FILE;
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run build/bin/qsync-crd-gen > " << CRD_FILE;
  const std::string committed = read_file(path);
  const std::string generated = hybrid_training_job_crd_yaml();
  EXPECT_TRUE(committed == generated) << CRD_FILE << " is stale: run build/bin/qsync-crd-gen > " << CRD_FILE
                                      << "\nfirst difference at " << first_difference(committed, generated, "committed", "generated");
}

TEST(CrdAgreement, ChartCrdIsIdenticalToTheTopLevelCrd) {
  const std::filesystem::path chart = SOURCE_DIR / CHART_CRD_FILE;
  if (!std::filesystem::exists(chart)) GTEST_SKIP() << CHART_CRD_FILE << " does not exist yet (the Helm chart is not written)";
  const std::string top = read_file(SOURCE_DIR / CRD_FILE);
  const std::string copy = read_file(chart);
  EXPECT_TRUE(top == copy) << CHART_CRD_FILE << " differs from " << CRD_FILE << ": run cp " << CRD_FILE << " "
                           << CHART_CRD_FILE << "\nfirst difference at " << first_difference(copy, top, "chart", "crds/");
}

}  // namespace
}  // namespace qsync::api
