// File: tests/e2e/operator_e2e_test.cpp
// The operator end to end, for real: qsync-kube-test-server with its local kubelet (worker Pods
// run as qsync-worker processes), `kubectl apply -f crds/`, Nodes for a training and an
// inference pool, CPU device profiles measured with `qsync-worker profile` and stored as
// labelled ConfigMaps (the commands a ProfileMissing status prints), qsync-operator as a
// process, and examples/k8s/fmnist-cpu.yaml (the zoo MLP on Fashion-MNIST over two ranks of
// different device classes) planned, trained and Succeeded; `kubectl get htj` shows the printer
// columns. Failure paths: a worker killed mid-run (whole-job restart from the last checkpoint),
// the operator restarted mid-run (same pods, job continues), suspend (SIGTERM, checkpoint,
// status.lastCheckpointStep from the workers' termination messages) and resume from that
// checkpoint, and invalid specs (refused by the
// schema at apply, or Failed naming the selector no node matches). Each test prints the
// server's recent requests and the operator's log when it fails. Skipped without kubectl.
#include "tests/e2e/operator_e2e_fixture.h"

namespace qsync::test {
namespace {

TEST_F(OperatorE2eTest, JobPlansTrainsAndSucceeds) {
  create_nodes_and_profiles();
  cluster_->start_operator(master_port_);
  KubectlResult applied = cluster_->kubectl({"apply", "-f", kJobFile});
  ASSERT_EQ(applied.code, 0) << applied.err;
  EXPECT_NE(applied.out.find("hybridtrainingjob.qsync.dev/fmnist-cpu created"), std::string::npos) << applied.out;
  ASSERT_EQ(wait_phase("fmnist-cpu", "Succeeded", 60s), "Succeeded");

  KubectlResult table = cluster_->kubectl({"get", "htj"});
  ASSERT_EQ(table.code, 0) << table.err;
  for (const char* column : {"NAME", "PHASE", "RANKS", "PREDICTED STEP", "AGE"})
    EXPECT_NE(table.out.find(column), std::string::npos) << "no " << column << " column in\n" << table.out;
  std::istringstream rows(table.out);
  std::string header, row, name, job_phase, ranks;
  std::getline(rows, header);
  std::getline(rows, row);
  std::istringstream(row) >> name >> job_phase >> ranks;
  EXPECT_EQ(name, "fmnist-cpu");
  EXPECT_EQ(job_phase, "Succeeded");
  EXPECT_EQ(ranks, "2");

  const json job = job_object("fmnist-cpu");
  const json& plan = job["status"]["plan"];
  ASSERT_EQ(plan["ranks"].size(), 2u) << job["status"].dump(2);
  EXPECT_GT(plan.value("predictedStepSeconds", 0.0), 0.0);
  EXPECT_EQ(plan["ranks"][0]["node"], "train-0");
  EXPECT_EQ(plan["ranks"][0]["deviceClass"], class_here("cpu-avx512"));
  EXPECT_EQ(plan["ranks"][1]["node"], "infer-0");
  EXPECT_EQ(plan["ranks"][1]["deviceClass"], class_here("cpu-avx2"));
  int64_t batch = 0;
  for (const json& r : plan["ranks"]) {
    EXPECT_GT(r.value("predictedStepSeconds", 0.0), 0.0);
    batch += r.value("localBatch", int64_t(0));
  }
  EXPECT_EQ(batch, 64);
  EXPECT_EQ(condition_status(job, "Planned"), "True");
  EXPECT_EQ(condition_status(job, "Succeeded"), "True");
  EXPECT_EQ(condition_status(job, "Running"), "False");
  EXPECT_EQ(job["status"].value("restarts", -1), 0);
  EXPECT_EQ(logged_step("fmnist-cpu-worker-0"), 40);
  EXPECT_EQ(logged_step("fmnist-cpu-worker-1"), 40);

  KubectlResult described = cluster_->kubectl({"describe", "htj", "fmnist-cpu"});
  EXPECT_EQ(described.code, 0) << described.err;
  for (const char* part : {"Conditions", "Succeeded", "Events", "SuccessfulCreatePod"})
    EXPECT_NE(described.out.find(part), std::string::npos) << "no " << part << " in\n" << described.out;

  // cleanPodPolicy All: the finished job keeps its status, its pods go.
  EXPECT_TRUE(poll_until([&] { return cluster_->jsonpath({"pods", "-l", "qsync.dev/job=fmnist-cpu"}, "{.items[*].metadata.name}").empty(); },
                         20s));
}

TEST_F(OperatorE2eTest, KilledWorkerRestartsTheJobFromItsLastCheckpoint) {
  create_nodes_and_profiles();
  cluster_->start_operator(master_port_);
  ASSERT_EQ(apply_job("fmnist-killed", {{"steps: 40", "steps: 30"}}).code, 0);
  // Rank 1's process (the kubelet's containerID), found while the workers start up.
  int pid = 0;
  ASSERT_TRUE(poll_until(
      [&] {
        const json pod = pod_object("fmnist-killed-worker-1");
        const std::string id =
            pod.is_object() ? pod.value(json::json_pointer("/status/containerStatuses/0/containerID"), std::string()) : "";
        if (id.rfind("local://", 0) == 0) pid = std::stoi(id.substr(8));
        if (pid == 0) std::this_thread::sleep_for(200ms);
        return pid > 0;
      },
      60s))
      << "rank 1's pod did not start; phase " << phase("fmnist-killed");
  // Killed right after the first checkpoint (step 10 of 30; rank 0 writes it to the claim's
  // directory), well before the end.
  const std::string checkpoint =
      cluster_->kubelet_root() + "/claims/default/fmnist-killed-checkpoints/fmnist-killed/latest.qckpt";
  ASSERT_TRUE(poll_until([&] { return std::filesystem::exists(checkpoint); }, 60s))
      << "no checkpoint at " << checkpoint << "; phase " << phase("fmnist-killed");
  ASSERT_EQ(::kill(pid, SIGKILL), 0);  // the worker dies: exit 137

  ASSERT_EQ(wait_phase("fmnist-killed", "Succeeded", 80s), "Succeeded");
  const json job = job_object("fmnist-killed");
  EXPECT_EQ(job["status"].value("restarts", -1), 1);
  EXPECT_EQ(condition_status(job, "Succeeded"), "True");
  for (const char* rank : {"fmnist-killed-worker-0", "fmnist-killed-worker-1"}) {
    const std::string log = cluster_->pod_log("default", rank);
    const size_t at = log.find("resumed from ");
    ASSERT_NE(at, std::string::npos) << rank << " did not resume from a checkpoint:\n" << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
    const size_t step_at = log.find("at step ", at);
    ASSERT_NE(step_at, std::string::npos);
    EXPECT_GT(std::stoll(log.substr(step_at + 8)), 0) << log.substr(at, 200);
  }
  EXPECT_EQ(logged_step("fmnist-killed-worker-0"), 30);
}

TEST_F(OperatorE2eTest, RestartedOperatorAdoptsTheRunningPods) {
  create_nodes_and_profiles();
  cluster_->start_operator(master_port_);
  ASSERT_EQ(apply_job("fmnist-handover", {{"steps: 40", "steps: 60"}, {"cleanPodPolicy: All", "cleanPodPolicy: None"}}).code, 0);
  // Step 1 is logged (then every 50): the operator goes while the job trains.
  ASSERT_TRUE(poll_until([&] { return logged_step("fmnist-handover-worker-1") >= 1; }, 60s))
      << "rank 1 did not start training; phase " << phase("fmnist-handover");
  const std::string uids_before =
      cluster_->jsonpath({"pods", "-l", "qsync.dev/job=fmnist-handover"}, "{.items[*].metadata.uid}");
  EXPECT_EQ(cluster_->stop_operator(), std::optional<int>(0)) << "qsync-operator should exit cleanly on SIGTERM";
  cluster_->start_operator(master_port_);
  ASSERT_EQ(wait_phase("fmnist-handover", "Succeeded", 80s), "Succeeded");
  const std::string uids_after =
      cluster_->jsonpath({"pods", "-l", "qsync.dev/job=fmnist-handover"}, "{.items[*].metadata.uid}");
  EXPECT_EQ(std::count(uids_before.begin(), uids_before.end(), ' '), 1) << uids_before;
  EXPECT_EQ(uids_after, uids_before) << "the restarted operator replaced or duplicated the pods";
  const json job = job_object("fmnist-handover");
  EXPECT_EQ(job["status"].value("restarts", -1), 0);
  EXPECT_EQ(logged_step("fmnist-handover-worker-0"), 60);
}

TEST_F(OperatorE2eTest, SuspendCheckpointsAndResumeContinuesFromIt) {
  create_nodes_and_profiles();
  cluster_->start_operator(master_port_);
  // Enough steps to be still training when suspended; a checkpoint every 10 steps.
  ASSERT_EQ(apply_job("fmnist-suspend", {{"steps: 40", "steps: 300"}}).code, 0);
  ASSERT_EQ(wait_phase("fmnist-suspend", "Running", 60s), "Running");
  const std::string checkpoint =
      cluster_->kubelet_root() + "/claims/default/fmnist-suspend-checkpoints/fmnist-suspend/latest.qckpt";
  ASSERT_TRUE(poll_until([&] { return std::filesystem::exists(checkpoint); }, 60s))
      << "no checkpoint at " << checkpoint << "; phase " << phase("fmnist-suspend");
  auto last_checkpoint_step = [&] {
    const std::string text = cluster_->jsonpath({"htj", "fmnist-suspend"}, "{.status.lastCheckpointStep}");
    return text.empty() ? int64_t(0) : std::stoll(text);
  };
  EXPECT_EQ(last_checkpoint_step(), 0) << "no worker has exited yet: nothing reported a checkpoint";

  expect_ok({"patch", "htj", "fmnist-suspend", "--type", "merge", "-p", R"({"spec":{"runPolicy":{"suspend":true}}})"});
  ASSERT_EQ(wait_phase("fmnist-suspend", "Suspended", 30s), "Suspended");
  // The pods get SIGTERM (graceful deletion), agree on a step, checkpoint it and exit; then go.
  ASSERT_TRUE(poll_until(
      [&] { return cluster_->jsonpath({"pods", "-l", "qsync.dev/job=fmnist-suspend"}, "{.items[*].metadata.name}").empty(); },
      60s))
      << "the suspended job's pods did not go";
  int64_t suspended_at = 0;
  ASSERT_TRUE(poll_until([&] { return (suspended_at = last_checkpoint_step()) > 0; }, 20s))
      << "status.lastCheckpointStep stayed 0 after the SIGTERM checkpoint: " << job_object("fmnist-suspend")["status"].dump(2);
  const std::string stopped_log = cluster_->pod_log("default", "fmnist-suspend-worker-0");
  EXPECT_NE(stopped_log.find("stop requested: checkpointing at step " + std::to_string(suspended_at)), std::string::npos)
      << "lastCheckpointStep " << suspended_at << " is not the step rank 0 stopped at:\n"
      << stopped_log.substr(stopped_log.size() > 3000 ? stopped_log.size() - 3000 : 0);
  EXPECT_LT(suspended_at, 300) << "the job finished before it was suspended: raise its steps";
  const json suspended = job_object("fmnist-suspend");
  EXPECT_EQ(condition_status(suspended, "Suspended"), "True");
  EXPECT_EQ(condition_status(suspended, "Running"), "False");

  expect_ok({"patch", "htj", "fmnist-suspend", "--type", "merge", "-p", R"({"spec":{"runPolicy":{"suspend":false}}})"});
  ASSERT_EQ(wait_phase("fmnist-suspend", "Succeeded", 400s), "Succeeded");
  const json job = job_object("fmnist-suspend");
  EXPECT_EQ(job["status"].value("restarts", -1), 0) << "a resume is not a restart";
  EXPECT_EQ(condition_status(job, "Suspended"), "False");
  // The new pods resumed from the suspend's checkpoint (the log keeps both pods of one name).
  for (const char* rank : {"fmnist-suspend-worker-0", "fmnist-suspend-worker-1"}) {
    const std::string log = cluster_->pod_log("default", rank);
    const size_t at = log.find("resumed from ");
    ASSERT_NE(at, std::string::npos) << rank << " did not resume:\n" << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
    const size_t step_at = log.find("at step ", at);
    ASSERT_NE(step_at, std::string::npos) << log.substr(at, 200);
    EXPECT_EQ(std::stoll(log.substr(step_at + 8)), suspended_at) << log.substr(at, 200);
  }
  // Rank 0 checkpoints the final step at the end: that is the last checkpoint.
  EXPECT_EQ(job["status"].value("lastCheckpointStep", int64_t(-1)), 300) << job["status"].dump(2);
  EXPECT_EQ(logged_step("fmnist-suspend-worker-0"), 300);
}

TEST_F(OperatorE2eTest, InvalidSpecsAreRefusedOrFailWithWhatToFix) {
  KubectlResult negative = apply_job("bad-batch", {{"globalBatch: 64", "globalBatch: -64"}});
  EXPECT_NE(negative.code, 0);
  EXPECT_NE(negative.err.find("spec.globalBatch"), std::string::npos) << negative.err;
  KubectlResult allocator = apply_job("bad-allocator", {{"allocator: exact", "allocator: fastest"}});
  EXPECT_NE(allocator.code, 0);
  EXPECT_NE(allocator.err.find("spec.planning.allocator"), std::string::npos) << allocator.err;
  EXPECT_EQ(cluster_->jsonpath({"htj"}, "{.items[*].metadata.name}"), "") << "a refused job was stored";

  expect_ok({"apply", "-f", kNodesFile});
  cluster_->start_operator(master_port_);
  ASSERT_EQ(apply_job("no-nodes", {{"{qsync.dev/pool: inference}", "{qsync.dev/pool: gpu-a100}"}}).code, 0);
  ASSERT_EQ(wait_phase("no-nodes", "Failed", 30s), "Failed");
  const json job = job_object("no-nodes");
  const std::string message = job["status"].value("message", "");
  EXPECT_NE(message.find("nodeSelector {qsync.dev/pool: gpu-a100}"), std::string::npos) << message;
  EXPECT_NE(message.find("kubectl label node"), std::string::npos) << message;
  EXPECT_EQ(condition_status(job, "Failed"), "True");
  EXPECT_EQ(cluster_->jsonpath({"pods"}, "{.items[*].metadata.name}"), "");
}

}  // namespace
}  // namespace qsync::test
