// File: operator/reconciler/operator_flags.h
// qsync-operator's command line, as the Helm chart passes it. Both `--flag value` and
// `--flag=value` are accepted; booleans also as a bare `--flag` (true).
//
//   qsync-operator [--kubeconfig PATH] [--namespace NS] [--leader-elect=true|false]
//                  [--leader-election-namespace NS] [--leader-election-id NAME]
//                  [--metrics-port 8080] [--health-port 8081] [--workers 4] [--qps 20] [--burst 30]
//                  [--worker-image IMAGE] [--master-port 29500] [--prometheus-url URL]
//                  [--gpu-worker-image IMAGE] [--gpu-ranks-on-cpu=true|false]
//                  [--gpu-tolerations JSON]   (a list of core/v1 Tolerations for GPU ranks' pods)
//                  [--gang-scheduler-name NAME]  (schedulerName of gang-scheduled jobs' pods)
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::reconciler {

struct OperatorFlags {
  std::string kubeconfig;                 // "": in-cluster, $KUBECONFIG or ~/.kube/config
  std::string namespace_;                 // "": every namespace
  bool leader_elect = false;
  std::string leader_election_namespace;  // "": the client's namespace
  std::string leader_election_id = "qsync-operator";
  int metrics_port = 8080;                // negative: no metrics endpoint
  int health_port = 8081;                 // negative: no probe server
  int workers = 4;
  double qps = 20;
  int burst = 30;
  std::string worker_image;
  std::string gpu_worker_image;  // GPU ranks' image (a CUDA build) when the job keeps the default image
  bool gpu_ranks_on_cpu = false;  // test clusters whose GPU nodes are stand-ins: GPU ranks run on CPUs
  int master_port = 29500;
  std::string prometheus_url;  // the Prometheus a borrowing entry's demand query goes to by default
  nlohmann::json gpu_tolerations = nlohmann::json::array();  // every GPU rank's pod tolerates these
  std::string gang_scheduler_name;  // gang-scheduled jobs' pods ("": the gang scheduler's usual name)
  bool help = false;
};

extern const char* OPERATOR_USAGE;

// Throws std::invalid_argument naming the flag and what it takes.
OperatorFlags parse_operator_flags(const std::vector<std::string>& args);

}  // namespace qsync::reconciler
