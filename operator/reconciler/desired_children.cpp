// File: operator/reconciler/desired_children.cpp
// The Service, plan ConfigMap and Pods a HybridTrainingJob owns (see desired_children.h).
#include "operator/reconciler/desired_children.h"

#include "operator/controller/owner_refs.h"
#include "operator/reconciler/pod_group.h"
#include "operator/reconciler/worker_pod_settings.h"
#include "planner/device_profile.h"
#include "planner/worker_command.h"

namespace qsync::reconciler {
namespace {

using json = nlohmann::json;

// The default of spec.image in the CRD (api::HybridTrainingJobSpec's initializer).
const std::string& crd_default_image() {
  static const std::string image = api::HybridTrainingJobSpec{}.image;
  return image;
}

json child_metadata(const api::HybridTrainingJob& job, const std::string& name) {
  json meta = {{"name", name}, {"namespace", job.namespace_name()}, {"labels", {{JOB_LABEL, job.name()}}}};
  return meta;
}

json owned(json child, const json& job_object) {
  controller::set_controller_reference(child, job_object);
  return child;
}

std::string checkpoint_dir(const api::HybridTrainingJob& job) {
  std::string sub = job.spec.checkpoint.dir;
  while (!sub.empty() && sub.front() == '/') sub.erase(sub.begin());
  return std::string(CHECKPOINT_MOUNT) + "/" + (sub.empty() ? job.name() : sub);
}

json env_var(const std::string& name, const std::string& value) { return {{"name", name}, {"value", value}}; }

}  // namespace

std::string service_name(const std::string& job) { return job + "-workers"; }
std::string plan_config_map_name(const std::string& job) { return job + "-plan"; }
std::string pod_name(const std::string& job, int64_t rank) { return job + "-worker-" + std::to_string(rank); }
std::string master_address(const std::string& job, const std::string& ns) {
  return pod_name(job, 0) + "." + service_name(job) + "." + ns + ".svc";
}

std::string worker_image(const api::HybridTrainingJob& job, const ChildOptions& options, bool gpu_rank) {
  if (!job.spec.image.empty() && job.spec.image != crd_default_image()) return job.spec.image;
  if (gpu_rank && !options.gpu_worker_image.empty()) return options.gpu_worker_image;
  return options.worker_image.empty() ? crd_default_image() : options.worker_image;
}

bool rank_runs_on_gpu(const DiscoveredRank& rank, const ChildOptions& options) {
  return is_gpu_device_class(rank.device_class) && !options.gpu_ranks_on_cpu;
}

json desired_service(const json& job_object, const api::HybridTrainingJob& job, const ChildOptions& options) {
  json svc = {{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", child_metadata(job, service_name(job.name()))},
              {"spec",
               {{"clusterIP", "None"},
                {"publishNotReadyAddresses", true},  // ranks rendezvous before they are Ready
                {"selector", {{JOB_LABEL, job.name()}}},
                {"ports", json::array({{{"name", "rendezvous"},
                                        {"port", options.master_port},
                                        {"targetPort", options.master_port},
                                        {"protocol", "TCP"}}})}}}};
  return owned(std::move(svc), job_object);
}

json desired_plan_config_map(const json& job_object, const api::HybridTrainingJob& job, const JobPlan& plan,
                             int64_t attempt) {
  json data = json::object();
  for (size_t r = 0; r < plan.rank_files.size(); ++r) data["rank-" + std::to_string(r) + ".yaml"] = plan_to_yaml(plan.rank_files[r]);
  data["plan.json"] = job_plan_to_json(plan).dump(2);
  json meta = child_metadata(job, plan_config_map_name(job.name()));
  meta["annotations"] = {{GENERATION_ANNOTATION, std::to_string(job.generation())},
                         {ATTEMPT_ANNOTATION, std::to_string(attempt)}};
  json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", meta}, {"data", data}};
  return owned(std::move(cm), job_object);
}

std::vector<std::string> worker_command(const api::HybridTrainingJob& job, const DiscoveredRank& rank,
                                        const ChildOptions& options) {
  const api::HybridTrainingJobSpec& s = job.spec;
  WorkerLaunch l;
  l.binary = WORKER_BINARY;
  l.model = s.model.config_map ? std::string(MODEL_MOUNT) + "/" + s.model.config_map->key
                               : s.model.name_or_file();
  l.data = s.data.volume ? std::string(DATA_MOUNT) + (s.data.volume->path.empty() ? "" : "/" + s.data.volume->path)
                         : s.data.path;
  l.plan_file = std::string(PLAN_MOUNT) + "/rank-" + std::to_string(rank.rank) + ".yaml";
  if (!is_gpu_device_class(rank.device_class) || rank_runs_on_gpu(rank, options)) l.device_class = rank.device_class;
  l.metrics_port = WORKER_METRICS_PORT;
  l.checkpoint_dir = checkpoint_dir(job);
  l.resume = true;  // harmless without a checkpoint: the worker starts from scratch
  l.termination_log = TERMINATION_LOG;
  return worker_train_command(job.name(), s, l);
}

json desired_pod(const json& job_object, const api::HybridTrainingJob& job, const DiscoveredRank& rank,
                 int64_t world_size, int64_t attempt, const ChildOptions& options,
                 const std::vector<DiscoveredRank>& planned) {
  const api::HybridTrainingJobSpec& s = job.spec;
  const std::string name = pod_name(job.name(), rank.rank);
  json meta = child_metadata(job, name);
  meta["labels"][RANK_LABEL] = std::to_string(rank.rank);
  meta["labels"][ATTEMPT_LABEL] = std::to_string(attempt);
  meta["labels"][POOL_KIND_LABEL] = rank.pool_kind;
  if (const GangScheduler* gang = job_gang_scheduler(job)) meta["labels"][gang->pod_group_label] = pod_group_name(job.name());
  meta["annotations"] = {{"qsync.dev/node", rank.node},
                         {"qsync.dev/device-class", rank.device_class},
                         {WORLD_SIZE_ANNOTATION, std::to_string(world_size)}};

  json env = json::array({env_var("MASTER_ADDR", master_address(job.name(), job.namespace_name())),
                          env_var("MASTER_PORT", std::to_string(options.master_port)),
                          env_var("RANK", std::to_string(rank.rank)), env_var("WORLD_SIZE", std::to_string(world_size)),
                          env_var("QSYNC_JOB", job.name())});
  const bool on_gpu = rank_runs_on_gpu(rank, options);
  if (on_gpu) {
    // The device plugin makes the pod's GPUs visible (NVIDIA_VISIBLE_DEVICES); the worker takes
    // LOCAL_RANK's of them. The CUDA JIT cache goes to the writable /tmp.
    env.push_back(env_var("LOCAL_RANK", "0"));
    env.push_back(env_var("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"));
    env.push_back(env_var("CUDA_CACHE_PATH", "/tmp/cuda-cache"));
  }

  const json resources = worker_resources(job, rank, on_gpu);
  const PodTemplateSpec pod_template = worker_pod_template(job, rank, options, on_gpu);

  json mounts = json::array({{{"name", "plan"}, {"mountPath", PLAN_MOUNT}, {"readOnly", true}},
                             {{"name", "checkpoints"}, {"mountPath", CHECKPOINT_MOUNT}},
                             {{"name", "tmp"}, {"mountPath", "/tmp"}}});
  json volumes = json::array({{{"name", "plan"}, {"configMap", {{"name", plan_config_map_name(job.name())}}}},
                              {{"name", "tmp"}, {"emptyDir", json::object()}}});
  if (s.checkpoint.volume) {
    volumes.push_back({{"name", "checkpoints"}, {"persistentVolumeClaim", {{"claimName", s.checkpoint.volume->claim_name}}}});
  } else {
    volumes.push_back({{"name", "checkpoints"}, {"emptyDir", json::object()}});
  }
  if (s.data.volume) {
    volumes.push_back({{"name", "data"},
                       {"persistentVolumeClaim", {{"claimName", s.data.volume->claim_name}, {"readOnly", true}}}});
    mounts.push_back({{"name", "data"}, {"mountPath", DATA_MOUNT}, {"readOnly", true}});
  }
  if (s.model.config_map) {
    volumes.push_back({{"name", "model"}, {"configMap", {{"name", s.model.config_map->name}}}});
    mounts.push_back({{"name", "model"}, {"mountPath", MODEL_MOUNT}, {"readOnly", true}});
  }

  json container = {{"name", "worker"},
                    {"image", worker_image(job, options, on_gpu)},
                    {"command", worker_command(job, rank, options)},
                    {"env", env},
                    {"ports", json::array({{{"name", "metrics"}, {"containerPort", WORKER_METRICS_PORT}, {"protocol", "TCP"}},
                                           {{"name", "rendezvous"}, {"containerPort", options.master_port}, {"protocol", "TCP"}}})},
                    {"volumeMounts", mounts},
                    {"terminationMessagePath", TERMINATION_LOG},
                    // a crash that wrote nothing still says why: the log's tail
                    {"terminationMessagePolicy", "FallbackToLogsOnError"},
                    {"securityContext",
                     {{"runAsNonRoot", true},
                      {"runAsUser", 65532},
                      {"allowPrivilegeEscalation", false},
                      {"readOnlyRootFilesystem", true},
                      {"capabilities", {{"drop", json::array({"ALL"})}}},
                      {"seccompProfile", {{"type", "RuntimeDefault"}}}}}};
  container["resources"] = resources;
  if (!s.image_pull_policy.empty()) container["imagePullPolicy"] = s.image_pull_policy;

  const json affinity =
      placement_affinity(rank, planned.empty() ? std::vector<DiscoveredRank>{rank} : planned,
                         scheduler_places_pods(job, pod_template));
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", meta},
              {"spec",
               {{"restartPolicy", "Never"},
                {"hostname", name},
                {"subdomain", service_name(job.name())},
                {"affinity", affinity},
                {"securityContext",
                 {{"runAsNonRoot", true}, {"runAsUser", 65532}, {"fsGroup", 65532},
                  {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
                {"terminationGracePeriodSeconds", 60},  // time to write the SIGTERM checkpoint
                {"containers", json::array({container})},
                {"volumes", volumes}}}};
  apply_pod_template(pod, pod_template);
  return owned(std::move(pod), job_object);
}

}  // namespace qsync::reconciler
