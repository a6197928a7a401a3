// File: tests/kube_api_server/local_kubelet_test.cpp
// The local kubelet's node emulation (local_kubelet.h), driven through the in-process API
// server with /bin/sh pods: /usr/local/bin/NAME mapped to the bin dir, ConfigMap / emptyDir /
// persistentVolumeClaim volumes with their mount paths rewritten into args and env, Service
// host names resolved to the loopback, node binding from node affinity, a Pod waiting for its
// ConfigMap, ports already taken on the shared loopback, deletion with SIGTERM then SIGKILL
// after the Pod's grace period, and graceful deletion (the Pod stays Terminating, its name
// taken, until its process has exited; a second DELETE may shorten the grace period; Pods it
// does not run and gracePeriodSeconds=0 go at once), and termination messages (the file behind
// terminationMessagePath, or the log's tail with FallbackToLogsOnError; written before a
// gracefully deleted Pod goes).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_server.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kPods = "/api/v1/namespaces/default/pods";
const std::string kConfigMaps = "/api/v1/namespaces/default/configmaps";

class LocalKubeletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("local-kubelet-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    ServerOptions options;
    options.local_kubelet = true;
    options.kubelet_log_dir = (dir_ / "logs").string();
    options.kubelet_bin_dir = (dir_ / "bin").string();
    options.kubelet_root_dir = (dir_ / "root").string();
    server_ = std::make_unique<ApiServer>(options);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  int post(const std::string& target, const json& body) {
    return server_->call("POST", target, body.dump(), {{"Content-Type", "application/json"}}).status;
  }
  json pod_object(const std::string& name) { return server_->get_object("v1", "pods", "default", name); }
  std::string phase_of(const std::string& name) {
    json pod = pod_object(name);
    return pod.is_null() || !pod.contains("status") ? std::string() : pod["status"].value("phase", "");
  }
  std::string wait_phase(const std::string& name, const std::string& phase) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (phase_of(name) != phase && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
    return phase_of(name);
  }
  std::string log_of(const std::string& name) {
    std::ifstream in(server_->kubelet_log_path("default", name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  int pid_of(const std::string& name) {
    json pod = pod_object(name);
    return std::stoi(pod["status"]["containerStatuses"][0]["containerID"].get<std::string>().substr(8));
  }
  // A program in the kubelet's bin dir, as an image would ship it in /usr/local/bin.
  void install(const std::string& name, const std::string& script) {
    fs::path path = dir_ / "bin" / name;
    std::ofstream(path) << "#!/bin/sh\n" << script << "\n";
    fs::permissions(path, fs::perms::owner_all);
  }

  fs::path dir_;
  std::unique_ptr<ApiServer> server_;
};

json shell_pod(const std::string& name, const std::string& script, long grace_seconds = 1) {
  return {{"metadata", {{"name", name}}},
          {"spec",
           {{"terminationGracePeriodSeconds", grace_seconds},
            {"restartPolicy", "Never"},
            {"containers", {{{"name", "main"}, {"image", "local"}, {"command", {"/bin/sh", "-c", script}}}}}}}};
}

TEST_F(LocalKubeletTest, MapsBinariesVolumesServiceNamesAndNodeAffinity) {
  install("show-config", "cat \"$1/settings.txt\"; echo; echo \"$2\"; echo \"peer=$PEER port=$PEER_PORT\";"
                         " echo scratch > \"$SCRATCH/file\" && echo wrote-scratch; pwd");
  ASSERT_EQ(post(kConfigMaps, {{"metadata", {{"name", "settings"}}}, {"data", {{"settings.txt", "alpha=1"}}}}), 201);
  json pod = {
      {"metadata", {{"name", "mapped"}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"affinity",
         {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution",
             {{"nodeSelectorTerms",
               {{{"matchExpressions", {{{"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", {"train-0"}}}}}}}}}}}}}},
        {"volumes", {{{"name", "config"}, {"configMap", {{"name", "settings"}}}}, {{"name", "scratch"}, {"emptyDir", json::object()}}}},
        {"containers",
         {{{"name", "main"},
           {"image", "local"},
           {"command", {"/usr/local/bin/show-config", "/etc/app/config", "--out=/scratch/result"}},
           {"workingDir", "/scratch"},
           {"env", {{{"name", "PEER"}, {"value", "job-worker-0.job-workers.default.svc"}},
                    {{"name", "PEER_PORT"}, {"value", "job-workers.default.svc.cluster.local:29500"}},
                    {{"name", "SCRATCH"}, {"value", "/scratch"}}}},
           {"volumeMounts", {{{"name", "config"}, {"mountPath", "/etc/app/config"}, {"readOnly", true}},
                             {{"name", "scratch"}, {"mountPath", "/scratch"}}}}}}}}}};
  ASSERT_EQ(post(kPods, pod), 201);
  ASSERT_EQ(wait_phase("mapped", "Succeeded"), "Succeeded") << log_of("mapped");
  json done = pod_object("mapped");
  EXPECT_EQ(done["spec"]["nodeName"], "train-0");
  const json& terminated = done["status"]["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(terminated["exitCode"], 0);
  EXPECT_EQ(terminated["reason"], "Completed");
  EXPECT_TRUE(done["status"].contains("startTime"));
  const std::string scratch = (dir_ / "root" / "pods" / done["metadata"]["uid"].get<std::string>() / "volumes" / "scratch").string();
  EXPECT_EQ(log_of("mapped"), "alpha=1\n--out=" + scratch + "/result\npeer=127.0.0.1 port=127.0.0.1:29500\nwrote-scratch\n" +
                                  scratch + "\n");
  EXPECT_TRUE(fs::exists(scratch + "/file")) << "an emptyDir lives as long as its Pod";
  ASSERT_EQ(server_->call("DELETE", kPods + "/mapped").status, 200);
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (fs::exists(scratch) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(fs::exists(scratch)) << "a deleted Pod's emptyDir is removed";
}

TEST_F(LocalKubeletTest, PodWaitsForItsConfigMapAndFailsWithItsExitCode) {
  json pod = shell_pod("waiting", "cat /etc/late/key; exit 7");
  pod["spec"]["volumes"] = {{{"name", "late"}, {"configMap", {{"name", "late"}}}}};
  pod["spec"]["containers"][0]["volumeMounts"] = {{{"name", "late"}, {"mountPath", "/etc/late"}}};
  // The shell's script is one arg; the mount path inside it is not at the start of the value.
  pod["spec"]["containers"][0]["command"] = {"/bin/sh", "-c", "cat \"$0/key\"; exit 7", "/etc/late"};
  ASSERT_EQ(post(kPods, pod), 201);
  auto deadline = std::chrono::steady_clock::now() + 20s;
  json waiting;
  while (std::chrono::steady_clock::now() < deadline) {
    waiting = pod_object("waiting");
    if (waiting["status"].contains("containerStatuses")) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(waiting["status"]["phase"], "Pending");
  EXPECT_EQ(waiting["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating");
  EXPECT_NE(waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"].get<std::string>().find("\"late\""),
            std::string::npos);
  ASSERT_EQ(post(kConfigMaps, {{"metadata", {{"name", "late"}}}, {"data", {{"key", "arrived"}}}}), 201);
  ASSERT_EQ(wait_phase("waiting", "Failed"), "Failed");
  json failed = pod_object("waiting");
  EXPECT_EQ(failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 7);
  EXPECT_EQ(failed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Error");
  EXPECT_EQ(failed["status"]["conditions"][0]["status"], "False");
  EXPECT_EQ(log_of("waiting"), "arrived");
}

TEST_F(LocalKubeletTest, ClaimOutlivesPodsAndTakenPortsBecomeFree) {
  auto claim_pod = [](const std::string& name, const std::string& script) {
    json pod = shell_pod(name, script);
    pod["spec"]["volumes"] = {{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "checkpoints"}}}}};
    pod["spec"]["containers"][0]["volumeMounts"] = {{{"name", "ckpt"}, {"mountPath", "/var/lib/ckpt"}}};
    pod["spec"]["containers"][0]["command"] = {"/bin/sh", "-c", script, "/var/lib/ckpt/job"};
    return pod;
  };
  ASSERT_EQ(post(kPods, claim_pod("writer", "mkdir -p \"$0\" && echo step-10 > \"$0/latest\"")), 201);
  ASSERT_EQ(wait_phase("writer", "Succeeded"), "Succeeded") << log_of("writer");
  ASSERT_EQ(server_->call("DELETE", kPods + "/writer").status, 200);
  ASSERT_EQ(post(kPods, claim_pod("reader", "cat \"$0/latest\"")), 201);
  ASSERT_EQ(wait_phase("reader", "Succeeded"), "Succeeded") << log_of("reader");
  EXPECT_EQ(log_of("reader"), "step-10\n");

  auto port_pod = [](const std::string& name, const std::string& script) {
    json pod = shell_pod(name, script);
    pod["spec"]["containers"][0]["command"] = {"/bin/sh", "-c", script, "--metrics-port", "9100"};
    pod["spec"]["containers"][0]["ports"] = {{{"name", "metrics"}, {"containerPort", 9100}}};
    return pod;
  };
  ASSERT_EQ(post(kPods, port_pod("first", "echo \"$0 $1\"; sleep 60")), 201);
  ASSERT_EQ(wait_phase("first", "Running"), "Running");
  ASSERT_EQ(post(kPods, port_pod("second", "echo \"$0 $1\"")), 201);
  ASSERT_EQ(wait_phase("second", "Succeeded"), "Succeeded");
  EXPECT_EQ(log_of("first"), "--metrics-port 9100\n");
  EXPECT_NE(log_of("second").find("--metrics-port 0\n"), std::string::npos) << log_of("second");
  EXPECT_NE(log_of("second").find("containerPort 9100 is taken"), std::string::npos) << log_of("second");
}

TEST_F(LocalKubeletTest, DeletionSendsSigtermThenSigkillAfterTheGracePeriod) {
  // Checkpoints on SIGTERM (as qsync-worker does) and exits.
  ASSERT_EQ(post(kPods, shell_pod("polite", "trap 'echo checkpoint-on-term; exit 0' TERM; while :; do sleep 0.05; done", 30)), 201);
  // Ignores SIGTERM: only SIGKILL after its 2 s grace period ends it.
  ASSERT_EQ(post(kPods, shell_pod("stubborn", "trap '' TERM; echo started; while :; do sleep 0.05; done", 2)), 201);
  ASSERT_EQ(wait_phase("polite", "Running"), "Running");
  ASSERT_EQ(wait_phase("stubborn", "Running"), "Running");
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (log_of("stubborn").empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(200ms);  // the traps are set once the shells run
  const int polite = pid_of("polite"), stubborn = pid_of("stubborn");
  ASSERT_EQ(server_->call("DELETE", kPods + "/polite").status, 200);
  ASSERT_EQ(server_->call("DELETE", kPods + "/stubborn").status, 200);
  const auto deleted_at = std::chrono::steady_clock::now();
  deadline = deleted_at + 20s;
  while (::kill(polite, 0) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_NE(::kill(polite, 0), 0) << "SIGTERM should end the polite Pod well within its 30 s grace period";
  EXPECT_NE(log_of("polite").find("checkpoint-on-term"), std::string::npos);
  if (std::chrono::steady_clock::now() - deleted_at < 1s) {
    EXPECT_EQ(::kill(stubborn, 0), 0) << "the stubborn Pod was killed before its 2 s grace period ended";
  }
  while (::kill(stubborn, 0) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_NE(::kill(stubborn, 0), 0) << "SIGKILL should end the stubborn Pod after its grace period";
}

TEST_F(LocalKubeletTest, DeletedPodStaysTerminatingUntilItsProcessExits) {
  // On SIGTERM it waits for the test to release it, so the Pod is Terminating for as long as
  // the test looks at it.
  const std::string release = (dir_ / "release").string();
  json pod = shell_pod("graceful", "", 30);
  pod["spec"]["containers"][0]["command"] = {
      "/bin/sh", "-c", "trap 'while [ ! -e \"$0\" ]; do sleep 0.02; done; echo released; exit 0' TERM; echo started; "
      "while :; do sleep 0.05; done", release};
  ASSERT_EQ(post(kPods, pod), 201);
  ASSERT_EQ(wait_phase("graceful", "Running"), "Running");
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (log_of("graceful").empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(200ms);  // the trap is set once the shell runs
  const int pid = pid_of("graceful");
  const std::string created_rv = pod_object("graceful")["metadata"]["resourceVersion"];

  auto deleted = server_->call("DELETE", kPods + "/graceful");
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_TRUE(json::parse(deleted.body)["metadata"].contains("deletionTimestamp")) << deleted.body;
  json terminating = pod_object("graceful");
  ASSERT_FALSE(terminating.is_null()) << "a Pod whose process still runs must stay until it exits";
  EXPECT_TRUE(terminating["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(terminating["metadata"].value("deletionGracePeriodSeconds", 0), 30);
  auto again = server_->call("POST", kPods, shell_pod("graceful", "exit 0").dump(), {{"Content-Type", "application/json"}});
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_EQ(json::parse(again.body).value("reason", ""), "AlreadyExists") << again.body;
  // Writes while Terminating (a label, the kubelet's status) do not finish the deletion.
  auto labelled = server_->call("PATCH", kPods + "/graceful", R"({"metadata":{"labels":{"seen":"yes"}}})",
                                {{"Content-Type", "application/merge-patch+json"}});
  EXPECT_EQ(labelled.status, 200) << labelled.body;
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(pod_object("graceful").is_null());
  EXPECT_EQ(::kill(pid, 0), 0) << "the process should still be running its SIGTERM trap";

  std::ofstream(release) << "go";
  deadline = std::chrono::steady_clock::now() + 20s;
  while (!pod_object("graceful").is_null() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(pod_object("graceful").is_null()) << "the Pod should be removed once its process exited";
  EXPECT_NE(::kill(pid, 0), 0);
  EXPECT_NE(log_of("graceful").find("released"), std::string::npos) << log_of("graceful");
  // Watchers saw it go Terminating (MODIFIED with deletionTimestamp), then DELETED.
  std::vector<json> events;
  std::istringstream lines(server_->call("GET", kPods + "?watch=1&timeoutSeconds=0&resourceVersion=" + created_rv).body);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) events.push_back(json::parse(line));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back()["type"], "DELETED");
  const bool saw_terminating = std::any_of(events.begin(), events.end() - 1, [](const json& e) {
    return e["type"] == "MODIFIED" && e["object"]["metadata"].contains("deletionTimestamp");
  });
  EXPECT_TRUE(saw_terminating) << server_->call("GET", kPods + "?watch=1&timeoutSeconds=0&resourceVersion=" + created_rv).body;
  // The name is free again.
  EXPECT_EQ(post(kPods, shell_pod("graceful", "exit 0")), 201);
}

TEST_F(LocalKubeletTest, FinishedAndForeignPodsAndForcedDeletesGoAtOnce) {
  ASSERT_EQ(post(kPods, shell_pod("finished", "exit 0")), 201);
  ASSERT_EQ(wait_phase("finished", "Succeeded"), "Succeeded");
  ASSERT_EQ(server_->call("DELETE", kPods + "/finished").status, 200);
  EXPECT_TRUE(pod_object("finished").is_null()) << "a Pod whose process exited has nothing to wait for";

  json other = shell_pod("elsewhere", "");
  other["spec"]["containers"][0]["command"] = {"sh", "-c", "sleep 60"};  // not an absolute path: not run here
  ASSERT_EQ(post(kPods, other), 201);
  ASSERT_EQ(server_->call("DELETE", kPods + "/elsewhere").status, 200);
  EXPECT_TRUE(pod_object("elsewhere").is_null());

  ASSERT_EQ(post(kPods, shell_pod("forced", "trap '' TERM; while :; do sleep 0.05; done", 30)), 201);
  ASSERT_EQ(wait_phase("forced", "Running"), "Running");
  const int pid = pid_of("forced");
  auto forced = server_->call("DELETE", kPods + "/forced", R"({"gracePeriodSeconds":0})");
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_TRUE(pod_object("forced").is_null()) << "gracePeriodSeconds=0 removes the Pod at once";
  EXPECT_EQ(post(kPods, shell_pod("forced", "exit 0")), 201);
  ::kill(-pid, SIGKILL);  // it ignores SIGTERM: do not wait out its 30 s
}

TEST_F(LocalKubeletTest, SecondDeleteShortensTheGracePeriod) {
  ASSERT_EQ(post(kPods, shell_pod("stubborn", "trap '' TERM; echo started; while :; do sleep 0.05; done", 30)), 201);
  ASSERT_EQ(wait_phase("stubborn", "Running"), "Running");
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (log_of("stubborn").empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(200ms);  // the trap is set once the shell runs
  ASSERT_EQ(server_->call("DELETE", kPods + "/stubborn").status, 200);
  EXPECT_EQ(pod_object("stubborn")["metadata"].value("deletionGracePeriodSeconds", 0), 30);
  auto shorter = server_->call("DELETE", kPods + "/stubborn?gracePeriodSeconds=1");
  ASSERT_EQ(shorter.status, 200) << shorter.body;
  EXPECT_EQ(json::parse(shorter.body)["metadata"].value("deletionGracePeriodSeconds", 0), 1) << shorter.body;
  deadline = std::chrono::steady_clock::now() + 20s;  // SIGKILL after 1 s, not 30
  while (!pod_object("stubborn").is_null() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(pod_object("stubborn").is_null()) << "the shortened grace period should end with SIGKILL and removal";
}

// A shell pod whose script gets the container path of its termination message as $0.
json reporting_pod(const std::string& name, const std::string& script, const std::string& policy) {
  json pod = shell_pod(name, "", 30);
  json& c = pod["spec"]["containers"][0];
  c["command"] = {"/bin/sh", "-c", script, "/dev/termination-log"};
  c["terminationMessagePath"] = "/dev/termination-log";
  if (!policy.empty()) c["terminationMessagePolicy"] = policy;
  return pod;
}

TEST_F(LocalKubeletTest, TerminationMessageComesFromTheFileOrTheLogTail) {
  auto message_of = [&](const std::string& name) {
    const json terminated = pod_object(name)["status"]["containerStatuses"][0]["state"]["terminated"];
    return terminated.value("message", std::string("<none>"));
  };
  // The file, wherever the container path maps to (a host file under the kubelet's root).
  ASSERT_EQ(post(kPods, reporting_pod("reports", "echo '{\"checkpointStep\": 40}' > \"$0\"; echo \"$0\"", "")), 201);
  ASSERT_EQ(wait_phase("reports", "Succeeded"), "Succeeded");
  EXPECT_EQ(message_of("reports"), "{\"checkpointStep\": 40}\n");
  EXPECT_EQ(log_of("reports").find("/dev/termination-log"), std::string::npos) << "the path should be a host file";
  EXPECT_NE(log_of("reports").find((dir_ / "root").string()), std::string::npos) << log_of("reports");

  // The file wins over the log, and only its first 4096 bytes count.
  ASSERT_EQ(post(kPods, reporting_pod("long", "head -c 5000 /dev/zero | tr '\\0' x > \"$0\"; echo noise; exit 2",
                                      "FallbackToLogsOnError")), 201);
  ASSERT_EQ(wait_phase("long", "Failed"), "Failed");
  EXPECT_EQ(message_of("long"), std::string(4096, 'x'));

  // FallbackToLogsOnError, a failed exit and an empty file: the last 80 lines of this run's log.
  ASSERT_EQ(post(kPods, reporting_pod("crashes", "i=1; while [ $i -le 100 ]; do echo line $i; i=$((i+1)); done; exit 3",
                                      "FallbackToLogsOnError")), 201);
  ASSERT_EQ(wait_phase("crashes", "Failed"), "Failed");
  std::string expected;
  for (int i = 21; i <= 100; ++i) expected += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(message_of("crashes"), expected);

  // The default policy (File) never falls back to the log; a success never does either.
  ASSERT_EQ(post(kPods, reporting_pod("silent", "echo some output; exit 1", "")), 201);
  ASSERT_EQ(wait_phase("silent", "Failed"), "Failed");
  EXPECT_EQ(message_of("silent"), "<none>");
  ASSERT_EQ(post(kPods, reporting_pod("fine", "echo some output", "FallbackToLogsOnError")), 201);
  ASSERT_EQ(wait_phase("fine", "Succeeded"), "Succeeded");
  EXPECT_EQ(message_of("fine"), "<none>");
}

TEST_F(LocalKubeletTest, GracefullyDeletedPodReportsItsTerminationMessageBeforeItGoes) {
  // On SIGTERM it writes its message (as a worker writes its checkpoint step) and exits.
  ASSERT_EQ(post(kPods, reporting_pod("stopping", "trap 'echo stopped-at-7 > \"$0\"; exit 0' TERM; echo started; "
                                                  "while :; do sleep 0.05; done",
                                      "FallbackToLogsOnError")), 201);
  ASSERT_EQ(wait_phase("stopping", "Running"), "Running");
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (log_of("stopping").empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(200ms);  // the trap is set once the shell runs
  const std::string created_rv = pod_object("stopping")["metadata"]["resourceVersion"];
  ASSERT_EQ(server_->call("DELETE", kPods + "/stopping").status, 200);
  deadline = std::chrono::steady_clock::now() + 20s;
  while (!pod_object("stopping").is_null() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(pod_object("stopping").is_null()) << "the Pod should be removed once its process exited";
  // Watchers saw the final status (terminated, with the message) before DELETED.
  std::vector<json> events;
  std::istringstream lines(server_->call("GET", kPods + "?watch=1&timeoutSeconds=0&resourceVersion=" + created_rv).body);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) events.push_back(json::parse(line));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back()["type"], "DELETED");
  const json last = events.back()["object"];
  const json terminated = last.value(json::json_pointer("/status/containerStatuses/0/state/terminated"), json::object());
  EXPECT_EQ(terminated.value("message", ""), "stopped-at-7\n") << last.dump();
  EXPECT_EQ(terminated.value("exitCode", -1), 0) << last.dump();
  EXPECT_EQ(last["status"].value("phase", ""), "Succeeded") << last.dump();
}

}  // namespace
}  // namespace qsync::kube_test
