// File: operator/reconciler/operator_main.cpp
// qsync-operator: the HybridTrainingJob operator. Builds the API client (kubeconfig or
// in-cluster), a Manager with informers for HybridTrainingJobs, Pods, Services, ConfigMaps
// (the job's namespace, or every namespace) and Nodes, the job controller (job_controller_setup.h),
// leader election on a Lease, /healthz + /readyz and /metrics, and stops gracefully on
// SIGTERM. Flags: operator_flags.h.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "operator/controller/manager.h"
#include "operator/kube/kube_config.h"
#include "operator/reconciler/job_controller_setup.h"
#include "operator/reconciler/operator_flags.h"

namespace qsync::reconciler {
namespace {

int operator_main(int argc, char** argv) {
  const OperatorFlags flags = parse_operator_flags(std::vector<std::string>(argv + 1, argv + argc));
  if (flags.help) {
    std::fputs(OPERATOR_USAGE, stdout);
    return 0;
  }
  auto metrics = std::make_shared<controller::OperatorMetrics>();
  kube::KubeConfig config = kube::kube_config_load(flags.kubeconfig);
  kube::ClientOptions client_options;
  client_options.qps = flags.qps;
  client_options.burst = flags.burst;
  client_options.observer = metrics->client_observer();
  kube::KubeClient client(config, client_options);
  std::fprintf(stderr, "qsync-operator: API server %s (%s)\n", config.server.c_str(), config.source.c_str());

  controller::ManagerOptions options;
  options.health_probe_port = flags.health_port;
  options.metrics_port = flags.metrics_port;
  options.leader_election = flags.leader_elect;
  options.leader_election_options.lease_namespace =
      flags.leader_election_namespace.empty() ? config.namespace_ : flags.leader_election_namespace;
  options.leader_election_options.lease_name = flags.leader_election_id;
  controller::Manager manager(&client, options, metrics);

  JobControllerOptions job_options;
  job_options.namespace_ = flags.namespace_;
  job_options.workers = flags.workers;
  job_options.reconciler.children = {.worker_image = flags.worker_image,
                                     .gpu_worker_image = flags.gpu_worker_image,
                                     .gpu_ranks_on_cpu = flags.gpu_ranks_on_cpu,
                                     .master_port = flags.master_port,
                                     .gpu_tolerations = flags.gpu_tolerations,
                                     .gang_scheduler_name = flags.gang_scheduler_name};
  job_options.reconciler.prometheus_url = flags.prometheus_url;
  const JobControllerParts parts = add_job_controller(manager, client, job_options);

  manager.shutdown_signal().install_signal_handlers();
  std::fprintf(stderr, "qsync-operator: watching %s; leader election %s; metrics port %d, health port %d\n",
               flags.namespace_.empty() ? "every namespace" : ("namespace " + flags.namespace_).c_str(),
               flags.leader_elect ? "on" : "off", flags.metrics_port, flags.health_port);
  manager.run();
  std::fprintf(stderr, "qsync-operator: stopped\n");
  return 0;
}

}  // namespace
}  // namespace qsync::reconciler

int main(int argc, char** argv) {
  try {
    return qsync::reconciler::operator_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync-operator: error: %s\n", e.what());
    return 1;
  }
}
