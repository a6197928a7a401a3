// File: tests/e2e/operator_crash_e2e_test.cpp
// The operator process killed with SIGKILL while it creates the job's pods, for real: qsync-
// operator against qsync-kube-test-server (its local kubelet runs the worker pods), every API
// call slowed by the server so the kill lands after the first pod and before the second. The
// operator started again must end with exactly the two pods of the job, rank 0's the one the
// dead operator made, each created once and owned by the job, no restart counted, and the job
// trained to Succeeded. Skipped without kubectl (operator_e2e_fixture.h).
#include "tests/e2e/operator_e2e_fixture.h"
#include "tests/support/http_client.h"

namespace qsync::test {
namespace {

constexpr const char* kJob = "fmnist-crash";
constexpr int kSlowCallMs = 700;  // each API call: the gap between the two pod creations

// A row of the server's request summary (verb, resource), or an empty object.
json summary_row(const json& summary, const std::string& verb, const std::string& resource) {
  for (const json& row : summary.value("requests", json::array()))
    if (row.value("verb", "") == verb && row.value("group", "") == "" && row.value("resource", "") == resource) return row;
  return json::object();
}

class OperatorCrashE2eTest : public OperatorE2eTest {
 protected:
  // The server's request counts (/_test/ requests are neither slowed nor counted), read with a
  // plain GET: kubectl's own discovery calls would be slowed too and close the window.
  json request_summary() {
    const HttpResponse r = http_get("127.0.0.1", cluster_->server_port(), "/_test/requests?summary=1");
    return r.status == 200 ? json::parse(r.body, nullptr, false) : json::object();
  }
  int64_t pods_created() {
    const json row = summary_row(request_summary(), "create", "pods");
    return row.value("count", int64_t(0)) - row.value("failed", int64_t(0));
  }
  void set_faults(const json& faults) {
    const std::string file = dir_->write("faults.json", faults.dump());
    expect_ok({"create", "--raw", "/_test/faults", "-f", file});
  }
};

TEST_F(OperatorCrashE2eTest, OperatorKilledBetweenPodCreationsLeavesNoDuplicateOrOrphan) {
  create_nodes_and_profiles();
  ASSERT_EQ(apply_job(kJob, {{"cleanPodPolicy: All", "cleanPodPolicy: None"}}).code, 0);
  set_faults({{"delayMs", kSlowCallMs}});  // kubectl's own calls stay quick until then
  cluster_->start_operator(master_port_);
  ASSERT_TRUE(poll_until([&] { return pods_created() >= 1; }, 120s)) << "the operator made no pod; phase " << phase(kJob);
  EXPECT_EQ(cluster_->kill_operator(), std::optional<int>(128 + SIGKILL));
  // A create the dead operator had sent may still land (the server holds it for its delay): both
  // are crash states the next operator must handle.
  EXPECT_LT(pods_created(), 2) << "the window closed: both pods were made before the kill";
  expect_ok({"delete", "--raw", "/_test/faults"});
  const std::string rank0_uid = cluster_->jsonpath({"pod", std::string(kJob) + "-worker-0"}, "{.metadata.uid}");
  EXPECT_FALSE(rank0_uid.empty()) << "the first pod made is rank 0's";

  cluster_->start_operator(master_port_);
  ASSERT_EQ(wait_phase(kJob, "Succeeded", 120s), "Succeeded");
  const std::string selector = std::string("qsync.dev/job=") + kJob;
  EXPECT_EQ(cluster_->jsonpath({"pods", "-l", selector}, "{.items[*].metadata.name}"),
            std::string(kJob) + "-worker-0 " + kJob + "-worker-1");
  EXPECT_EQ(cluster_->jsonpath({"pod", std::string(kJob) + "-worker-0"}, "{.metadata.uid}"), rank0_uid)
      << "the restarted operator replaced the pod the dead one made";
  EXPECT_EQ(pods_created(), 2) << "a pod was made twice: " << request_summary().dump();
  EXPECT_EQ(summary_row(request_summary(), "delete", "pods").value("count", 0), 0) << "a pod was deleted";
  const json job = job_object(kJob);
  const std::string job_uid = job["metadata"].value("uid", "");
  EXPECT_EQ(cluster_->jsonpath({"pods", "-l", selector}, "{.items[*].metadata.ownerReferences[0].uid}"),
            job_uid + " " + job_uid)
      << "a pod not owned by the job (an orphan)";
  EXPECT_EQ(job["status"].value("restarts", -1), 0);
  EXPECT_EQ(logged_step(std::string(kJob) + "-worker-0"), 40);
  EXPECT_EQ(logged_step(std::string(kJob) + "-worker-1"), 40);
}

}  // namespace
}  // namespace qsync::test
