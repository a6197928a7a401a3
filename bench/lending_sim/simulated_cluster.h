// File: bench/lending_sim/simulated_cluster.h
// The cluster the lending simulation runs the operator's logic against, at the level the
// logic observes it: GPU nodes, one inference Deployment (its replicas, annotations and pods)
// and the training job's worker pods. Pods move through the states a kubelet and scheduler
// give them, with configurable delays: Pending (no node has the GPUs; the scheduler binds to
// the node with the most free GPUs, as the test API server's does) -> Starting -> Ready, and
// Terminating -> gone. The Deployment controller creates and deletes pods to match replicas
// (surplus: unbound first, then not Ready, then the newest). Job pods are pinned to their
// planned node; a whole-job stop takes checkpoint_seconds, a start job_start_seconds. The
// workload's pods go to the nodes named infer-* (its node selector).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "operator/lending/gpu_accounting.h"
#include "operator/lending/lending_decision.h"

namespace qsync::lending_sim {

struct SimTimings {
  double reconcile_seconds = 5;         // the operator's requeue period
  double demand_lag_seconds = 30;       // a rate() window: the sample trails the demand
  double inference_start_seconds = 60;  // bound -> Ready (image, model load)
  double inference_stop_seconds = 10;   // deleted -> gone (drain)
  double checkpoint_seconds = 20;       // SIGTERM -> the agreed step checkpointed, pods gone
  double job_start_seconds = 45;        // pods bound -> training (rendezvous, resume)
};

struct SimNode {
  std::string name;
  int64_t gpus = 0;
};

class SimulatedCluster {
 public:
  SimulatedCluster(std::vector<SimNode> nodes, int64_t replicas, int64_t gpus_per_replica, SimTimings timings);

  // Moves pods through their states up to time t and runs the Deployment controller and the
  // scheduler.
  void advance_to(double t);

  // What the operator observes.
  lending::WorkloadObservation workload() const;
  std::vector<lending::NodeObservation> nodes() const;
  std::vector<lending::PodObservation> pods() const;
  int64_t ready_replicas() const;

  // What the operator writes: spec.replicas and its annotations.
  void scale_workload(int64_t replicas, int64_t serving_annotation, int64_t replicas_set);
  // The job: stop every worker pod (they checkpoint, then go); create one pod per rank, each
  // {node, GPUs}; whether any worker pod exists; whether all run.
  void stop_job();
  void start_job(const std::vector<std::pair<std::string, int64_t>>& ranks);
  bool job_has_pods() const;
  bool job_training() const;
  // GPUs on `nodes` held by the job's pods now.
  int64_t job_gpus_on(const std::vector<std::string>& nodes) const;

 private:
  enum class State { PENDING, STARTING, READY, TERMINATING };
  struct Pod {
    bool job = false;
    std::string affinity;  // job pods: the planned node
    std::string node;      // "" while unbound
    int64_t gpus = 0;
    State state = State::PENDING;
    double until = 0;    // STARTING: ready at; TERMINATING: gone at
    double created = 0;
  };
  int64_t free_on(const std::string& node) const;
  void reconcile_deployment();
  void schedule();

  std::vector<SimNode> nodes_;
  SimTimings timings_;
  int64_t gpus_per_replica_;
  int64_t replicas_;
  int64_t serving_annotation_ = 0, replicas_set_ = 0;
  std::vector<Pod> pods_;
  double now_ = 0;
};

}  // namespace qsync::lending_sim
