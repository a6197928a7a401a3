// File: tests/operator/reconciler/desired_children_test.cpp
// The Service, plan ConfigMap and Pods a HybridTrainingJob owns: names, labels, env, the worker
// command, volumes, node affinity, the restricted security context, owner references and
// resources on GPU and CPU ranks.
#include <gtest/gtest.h>

#include <algorithm>

#include "operator/api/hybrid_training_job.h"
#include "operator/reconciler/desired_children.h"
#include "planner/cli_args.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

json job_object(json spec_patch = json::object()) {
  json spec = {{"model", {{"zoo", "cnn"}}},
               {"data", {{"path", "/usr/share/datasets/fashion-mnist"}}},
               {"steps", 300},
               {"globalBatch", 128},
               {"optimizer", {{"name", "adamw"}, {"lr", 0.002}}},
               {"checkpoint", {{"intervalSteps", 50}}},
               {"pool", {{"training", json::array({{{"name", "train"}, {"nodeSelector", {{"pool", "t"}}}, {"count", 1}}})}}}};
  spec.merge_patch(spec_patch);
  return {{"apiVersion", "qsync.dev/v1alpha1"},
          {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "mnist"}, {"namespace", "team"}, {"uid", "uid-1"}, {"generation", 3}}},
          {"spec", spec}};
}

DiscoveredRank gpu_rank() { return {0, "node-a", "gpu-t4", POOL_KIND_TRAINING, "train", 0, 1}; }
DiscoveredRank cpu_rank() { return {1, "node-b", "cpu-avx2", POOL_KIND_INFERENCE, "infer", 8ll << 30, 0}; }

std::string env_of(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"])
    if (e["name"] == name) return e["value"];
  return "<absent>";
}

// ChildOptions with every field named (-Wmissing-field-initializers).
ChildOptions child_options(const std::string& worker_image, int master_port = 29500, const std::string& gpu_worker_image = "",
                           bool gpu_ranks_on_cpu = false) {
  return {.worker_image = worker_image, .gpu_worker_image = gpu_worker_image, .gpu_ranks_on_cpu = gpu_ranks_on_cpu,
          .master_port = master_port, .gpu_tolerations = json::array(),
          .gang_scheduler_name = ""};
}

bool has_arg(const std::vector<std::string>& cmd, const std::string& flag, const std::string& value = "") {
  auto it = std::find(cmd.begin(), cmd.end(), flag);
  if (it == cmd.end()) return false;
  return value.empty() || (it + 1 != cmd.end() && *(it + 1) == value);
}

TEST(DesiredChildren, NamesAreDeterministic) {
  EXPECT_EQ(service_name("mnist"), "mnist-workers");
  EXPECT_EQ(plan_config_map_name("mnist"), "mnist-plan");
  EXPECT_EQ(pod_name("mnist", 3), "mnist-worker-3");
  EXPECT_EQ(master_address("mnist", "team"), "mnist-worker-0.mnist-workers.team.svc");
}

TEST(DesiredChildren, PodHasLabelsEnvAndDns) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const json pod = desired_pod(obj, job, cpu_rank(), 2, 4, child_options("", 29612));
  EXPECT_EQ(pod["metadata"]["name"], "mnist-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team");
  const json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels["qsync.dev/job"], "mnist");
  EXPECT_EQ(labels["qsync.dev/rank"], "1");
  EXPECT_EQ(labels["qsync.dev/attempt"], "4");
  EXPECT_EQ(labels["qsync.dev/pool-kind"], "inference");
  EXPECT_EQ(pod["spec"]["hostname"], "mnist-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "mnist-workers");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(env_of(pod, "MASTER_ADDR"), "mnist-worker-0.mnist-workers.team.svc");
  EXPECT_EQ(env_of(pod, "MASTER_PORT"), "29612");
  EXPECT_EQ(env_of(pod, "RANK"), "1");
  EXPECT_EQ(env_of(pod, "WORLD_SIZE"), "2");
  EXPECT_EQ(env_of(pod, "QSYNC_JOB"), "mnist");
}

TEST(DesiredChildren, AffinityPinsThePlannedNode) {
  const json obj = job_object();
  const json pod = desired_pod(obj, api::hybrid_training_job_from_json(obj), gpu_rank(), 2, 0, {});
  const json& term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                        ["nodeSelectorTerms"][0]["matchExpressions"][0];
  EXPECT_EQ(term["key"], "kubernetes.io/hostname");
  EXPECT_EQ(term["operator"], "In");
  EXPECT_EQ(term["values"], json::array({"node-a"}));
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
}

TEST(DesiredChildren, RestrictedSecurityContext) {
  const json obj = job_object();
  const json pod = desired_pod(obj, api::hybrid_training_job_from_json(obj), gpu_rank(), 1, 0, {});
  const json& sc = pod["spec"]["containers"][0]["securityContext"];
  EXPECT_EQ(sc["runAsNonRoot"], true);
  EXPECT_EQ(sc["runAsUser"], 65532);
  EXPECT_EQ(sc["allowPrivilegeEscalation"], false);
  EXPECT_EQ(sc["readOnlyRootFilesystem"], true);
  EXPECT_EQ(sc["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_EQ(sc["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsNonRoot"], true);
}

TEST(DesiredChildren, WorkerReportsItsCheckpointThroughTheTerminationMessage) {
  const json obj = job_object();
  const json pod = desired_pod(obj, api::hybrid_training_job_from_json(obj), cpu_rank(), 2, 0, {});
  const json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["terminationMessagePath"], "/dev/termination-log");
  EXPECT_EQ(container["terminationMessagePolicy"], "FallbackToLogsOnError");
  const std::vector<std::string> cmd = container["command"].get<std::vector<std::string>>();
  // the worker writes where the kubelet reads
  EXPECT_TRUE(has_arg(cmd, "--termination-log", container["terminationMessagePath"].get<std::string>()));
  EXPECT_TRUE(has_arg(cmd, "--resume"));
}

TEST(DesiredChildren, EveryChildIsControlledByTheJob) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  JobPlan plan;
  plan.ranks = {gpu_rank()};
  plan.rank_files.push_back({});
  plan.rank_files[0].model = "cnn";
  for (const json& child : {desired_pod(obj, job, gpu_rank(), 1, 0, {}), desired_service(obj, job, {}),
                            desired_plan_config_map(obj, job, plan, 0)}) {
    ASSERT_EQ(child["metadata"]["ownerReferences"].size(), 1u) << child.dump();
    const json& ref = child["metadata"]["ownerReferences"][0];
    EXPECT_EQ(ref["kind"], "HybridTrainingJob");
    EXPECT_EQ(ref["apiVersion"], "qsync.dev/v1alpha1");
    EXPECT_EQ(ref["name"], "mnist");
    EXPECT_EQ(ref["uid"], "uid-1");
    EXPECT_EQ(ref["controller"], true);
    EXPECT_EQ(child["metadata"]["labels"]["qsync.dev/job"], "mnist");
  }
}

TEST(DesiredChildren, GpuRankGetsGpusItsClassAndTheGpuEnvironment) {
  json obj = job_object({{"resources", {{"requests", {{"cpu", "2"}, {"memory", "4Gi"}}}, {"limits", {{"memory", "8Gi"}}}}}});
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const ChildOptions options = child_options("registry.local/worker:1", 29500, "registry.local/worker-cuda:1");
  const json gpu = desired_pod(obj, job, gpu_rank(), 2, 0, options);
  const json& res = gpu["spec"]["containers"][0]["resources"];
  EXPECT_EQ(res["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(res["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(res["requests"]["cpu"], "2");
  EXPECT_EQ(res["limits"]["memory"], "8Gi");
  // The worker runs as its GPU class (and refuses to start on another GPU), in the CUDA image.
  EXPECT_TRUE(has_arg(gpu["spec"]["containers"][0]["command"], "--device-class", "gpu-t4"));
  EXPECT_EQ(gpu["spec"]["containers"][0]["image"], "registry.local/worker-cuda:1");
  EXPECT_EQ(env_of(gpu, "LOCAL_RANK"), "0");
  EXPECT_EQ(env_of(gpu, "NVIDIA_DRIVER_CAPABILITIES"), "compute,utility");
  EXPECT_EQ(env_of(gpu, "CUDA_CACHE_PATH"), "/tmp/cuda-cache");
  EXPECT_EQ(env_of(gpu, "CUDA_VISIBLE_DEVICES"), "<absent>");  // the device plugin's to set

  const json cpu = desired_pod(obj, job, cpu_rank(), 2, 0, options);
  const json& cres = cpu["spec"]["containers"][0]["resources"];
  EXPECT_FALSE(cres["limits"].contains("nvidia.com/gpu"));
  EXPECT_EQ(cres["requests"]["memory"], "4Gi");
  EXPECT_TRUE(has_arg(cpu["spec"]["containers"][0]["command"], "--device-class", "cpu-avx2"));
  EXPECT_EQ(cpu["spec"]["containers"][0]["image"], "registry.local/worker:1");
  EXPECT_EQ(env_of(cpu, "LOCAL_RANK"), "<absent>");
}

// A cluster whose GPU nodes only advertise nvidia.com/gpu (the e2e tests' kube_api_server):
// GPU ranks keep their GPUs' scheduling but run as the worker's default CPU class, in the CPU image.
TEST(DesiredChildren, GpuRanksOnCpuRunAsTheDefaultCpuClass) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const ChildOptions options = child_options("", 29500, "registry.local/worker-cuda:1", true);
  const json pod = desired_pod(obj, job, gpu_rank(), 2, 0, options);
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_FALSE(has_arg(pod["spec"]["containers"][0]["command"], "--device-class"));
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], api::HybridTrainingJobSpec{}.image);
  EXPECT_EQ(env_of(pod, "LOCAL_RANK"), "<absent>");
  EXPECT_FALSE(rank_runs_on_gpu(gpu_rank(), options));
  EXPECT_TRUE(rank_runs_on_gpu(gpu_rank(), {}));
  EXPECT_FALSE(rank_runs_on_gpu(cpu_rank(), {}));
}

TEST(DesiredChildren, OnnxModelsReachTheWorkerAsFiles) {
  const json in_image = job_object({{"model", {{"zoo", nullptr}, {"onnx", "/models/resnet18.onnx"}}}});
  EXPECT_TRUE(has_arg(worker_command(api::hybrid_training_job_from_json(in_image), cpu_rank()), "--model",
                      "/models/resnet18.onnx"));
  const json in_cm = job_object({{"model", {{"zoo", nullptr}, {"configMap", {{"name", "gpt-onnx"}, {"key", "model.onnx"}}}}}});
  EXPECT_TRUE(has_arg(worker_command(api::hybrid_training_job_from_json(in_cm), cpu_rank()), "--model",
                      "/etc/qsync/model/model.onnx"));  // the ConfigMap's binaryData mounted as a file
}

TEST(DesiredChildren, WorkerCommandFollowsTheSpec) {
  const json obj = job_object();
  const std::vector<std::string> cmd = worker_command(api::hybrid_training_job_from_json(obj), cpu_rank());
  ASSERT_GE(cmd.size(), 2u);
  EXPECT_EQ(cmd[0], "/usr/local/bin/qsync-worker");
  EXPECT_EQ(cmd[1], "train");
  EXPECT_TRUE(has_arg(cmd, "--model", "cnn"));
  EXPECT_TRUE(has_arg(cmd, "--plan", "/etc/qsync/plan/rank-1.yaml"));
  EXPECT_TRUE(has_arg(cmd, "--batch", "128"));
  EXPECT_TRUE(has_arg(cmd, "--steps", "300"));
  EXPECT_FALSE(has_arg(cmd, "--epochs"));
  EXPECT_TRUE(has_arg(cmd, "--lr", "0.002"));
  EXPECT_TRUE(has_arg(cmd, "--optimizer", "adamw"));
  EXPECT_TRUE(has_arg(cmd, "--lr-schedule", "cosine"));  // the CRD's default schedule
  EXPECT_TRUE(has_arg(cmd, "--metrics-port", "9100"));
  EXPECT_TRUE(has_arg(cmd, "--job-name", "mnist"));
  EXPECT_TRUE(has_arg(cmd, "--checkpoint-dir", "/var/lib/qsync/checkpoints/mnist"));
  EXPECT_TRUE(has_arg(cmd, "--checkpoint-every", "50"));
  EXPECT_TRUE(has_arg(cmd, "--resume"));
  EXPECT_TRUE(has_arg(cmd, "--log-json"));
  EXPECT_TRUE(has_arg(cmd, "--data", "/usr/share/datasets/fashion-mnist"));

  const json epochs = job_object({{"steps", nullptr}, {"epochs", 1.5}});
  const std::vector<std::string> ecmd = worker_command(api::hybrid_training_job_from_json(epochs), cpu_rank());
  EXPECT_TRUE(has_arg(ecmd, "--epochs", "1.5"));

  const json constant = job_object({{"optimizer", {{"schedule", "constant"}, {"warmupSteps", 20}}}});
  const std::vector<std::string> ccmd = worker_command(api::hybrid_training_job_from_json(constant), cpu_rank());
  EXPECT_TRUE(has_arg(ccmd, "--lr-schedule", "constant"));
  EXPECT_TRUE(has_arg(ccmd, "--warmup", "20"));
  EXPECT_FALSE(has_arg(ecmd, "--steps"));
}

// The operator's path of the one worker command line (planner/worker_command.h): the job's
// numbers at awkward values, as the API server stores them, reach the worker's flag parser
// unchanged (`qsync run`'s path: tests/planner/job_spec_test.cpp).
TEST(DesiredChildren, AwkwardNumbersReachTheWorkerUnchanged) {
  const json obj = job_object({{"steps", nullptr},
                               {"epochs", 0.3333333333333333},
                               {"globalBatch", 97},
                               {"optimizer", {{"name", "sgd"}, {"lr", 1e-7}, {"weightDecay", 2.5e-6},
                                              {"gradClip", 0.7071067811865476}, {"warmupSteps", 13}}},
                               {"evalEvery", 7},
                               {"evalLimit", 123}});
  const std::vector<std::string> cmd = worker_command(api::hybrid_training_job_from_json(obj), cpu_rank());
  auto value = [&](const std::string& flag) {
    auto it = std::find(cmd.begin(), cmd.end(), flag);
    return it != cmd.end() && it + 1 != cmd.end() ? *(it + 1) : std::string("<absent>");
  };
  EXPECT_EQ(parse_double_flag("--lr", value("--lr")), 1e-7);
  EXPECT_EQ(parse_double_flag("--weight-decay", value("--weight-decay")), 2.5e-6);
  EXPECT_EQ(parse_double_flag("--grad-clip", value("--grad-clip")), 0.7071067811865476);
  EXPECT_EQ(parse_double_flag("--epochs", value("--epochs")), 0.3333333333333333);
  EXPECT_EQ(parse_int_flag("--batch", value("--batch")), 97);
  EXPECT_EQ(parse_int_flag("--warmup", value("--warmup")), 13);
  EXPECT_EQ(parse_int_flag("--eval-every", value("--eval-every")), 7);
  EXPECT_EQ(parse_int_flag("--eval-limit", value("--eval-limit")), 123);
  EXPECT_EQ(value("--optimizer"), "sgd");
}

TEST(DesiredChildren, VolumesForPlanCheckpointsAndData) {
  const json plain = job_object();
  const json pod = desired_pod(plain, api::hybrid_training_job_from_json(plain), gpu_rank(), 1, 0, {});
  std::map<std::string, json> volumes;
  for (const json& v : pod["spec"]["volumes"]) volumes[v["name"]] = v;
  EXPECT_EQ(volumes["plan"]["configMap"]["name"], "mnist-plan");
  EXPECT_TRUE(volumes["checkpoints"].contains("emptyDir"));
  EXPECT_FALSE(volumes.count("data"));

  const json with_volumes = job_object({{"data", {{"path", nullptr}, {"volume", {{"claimName", "datasets"}, {"path", "fmnist"}}}}},
                                        {"checkpoint", {{"volume", {{"claimName", "ckpt"}}}}}});
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(with_volumes);
  const json pod2 = desired_pod(with_volumes, job, gpu_rank(), 1, 0, {});
  volumes.clear();
  for (const json& v : pod2["spec"]["volumes"]) volumes[v["name"]] = v;
  EXPECT_EQ(volumes["checkpoints"]["persistentVolumeClaim"]["claimName"], "ckpt");
  EXPECT_EQ(volumes["data"]["persistentVolumeClaim"]["claimName"], "datasets");
  EXPECT_TRUE(has_arg(pod2["spec"]["containers"][0]["command"], "--data", "/var/lib/qsync/data/fmnist"));
}

TEST(DesiredChildren, ImageFromSpecOrFlag) {
  const json plain = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(plain);
  EXPECT_EQ(worker_image(job, child_options("registry.local/worker:dev")), "registry.local/worker:dev");
  EXPECT_EQ(worker_image(job, {}), api::HybridTrainingJobSpec{}.image);
  const json custom = job_object({{"image", "mine/worker:1"}});
  EXPECT_EQ(worker_image(api::hybrid_training_job_from_json(custom), child_options("registry.local/worker:dev", 1)),
            "mine/worker:1");
  // A GPU rank takes --gpu-worker-image when given, else --worker-image; spec.image wins over both.
  const ChildOptions both = child_options("registry.local/worker:dev", 29500, "registry.local/worker-cuda:dev");
  EXPECT_EQ(worker_image(job, both, true), "registry.local/worker-cuda:dev");
  EXPECT_EQ(worker_image(job, both, false), "registry.local/worker:dev");
  EXPECT_EQ(worker_image(job, child_options("registry.local/worker:dev"), true), "registry.local/worker:dev");
  EXPECT_EQ(worker_image(api::hybrid_training_job_from_json(custom), both, true), "mine/worker:1");
}

TEST(DesiredChildren, HeadlessServiceAndPlanConfigMap) {
  const json obj = job_object();
  const api::HybridTrainingJob job = api::hybrid_training_job_from_json(obj);
  const json svc = desired_service(obj, job, child_options("", 29555));
  EXPECT_EQ(svc["metadata"]["name"], "mnist-workers");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["selector"], json({{"qsync.dev/job", "mnist"}}));
  EXPECT_EQ(svc["spec"]["ports"][0]["name"], "rendezvous");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 29555);

  JobPlan plan;
  plan.ranks = {gpu_rank(), cpu_rank()};
  plan.rank_files.resize(2);
  plan.rank_files[0].model = plan.rank_files[1].model = "cnn";
  plan.summary.strategy = "exact";
  const json cm = desired_plan_config_map(obj, job, plan, 2);
  EXPECT_EQ(cm["metadata"]["name"], "mnist-plan");
  EXPECT_EQ(cm["metadata"]["annotations"]["qsync.dev/generation"], "3");
  EXPECT_EQ(cm["metadata"]["annotations"]["qsync.dev/attempt"], "2");
  EXPECT_TRUE(cm["data"].contains("rank-0.yaml"));
  EXPECT_TRUE(cm["data"].contains("rank-1.yaml"));
  const JobPlan back = job_plan_from_json(json::parse(cm["data"]["plan.json"].get<std::string>()));
  EXPECT_EQ(back.ranks, plan.ranks);
  EXPECT_EQ(back.summary.strategy, "exact");
}

}  // namespace
}  // namespace qsync::reconciler
