// File: bench/lending_sim/simulated_cluster.cpp
// Pod lifecycles, the Deployment controller and the GPU scheduler of the simulated cluster
// (see simulated_cluster.h).
#include "bench/lending_sim/simulated_cluster.h"

#include <algorithm>

namespace qsync::lending_sim {

SimulatedCluster::SimulatedCluster(std::vector<SimNode> nodes, int64_t replicas, int64_t gpus_per_replica, SimTimings timings)
    : nodes_(std::move(nodes)), timings_(timings), gpus_per_replica_(gpus_per_replica), replicas_(replicas) {
  // The day starts with the workload serving: every replica Ready.
  for (int64_t i = 0; i < replicas; ++i) pods_.push_back({false, "", "", gpus_per_replica, State::PENDING, 0, 0});
  schedule();
  for (Pod& p : pods_)
    if (p.state == State::STARTING) p.state = State::READY;
}

int64_t SimulatedCluster::free_on(const std::string& node) const {
  int64_t free = 0;
  for (const SimNode& n : nodes_)
    if (n.name == node) free = n.gpus;
  for (const Pod& p : pods_)
    if (p.node == node) free -= p.gpus;
  return free;
}

void SimulatedCluster::schedule() {
  for (Pod& p : pods_) {
    if (p.state != State::PENDING || !p.node.empty()) continue;
    std::string best;
    int64_t best_free = -1;
    for (const SimNode& n : nodes_) {
      if (p.job ? n.name != p.affinity : n.name.rfind("infer-", 0) != 0) continue;
      const int64_t f = free_on(n.name);
      if (f >= p.gpus && f > best_free) {
        best = n.name;
        best_free = f;
      }
    }
    if (best.empty()) continue;
    p.node = best;
    p.state = State::STARTING;
    p.until = now_ + (p.job ? timings_.job_start_seconds : timings_.inference_start_seconds);
  }
}

void SimulatedCluster::reconcile_deployment() {
  std::vector<size_t> active;
  for (size_t i = 0; i < pods_.size(); ++i)
    if (!pods_[i].job && pods_[i].state != State::TERMINATING) active.push_back(i);
  for (int64_t k = int64_t(active.size()); k < replicas_; ++k)
    pods_.push_back({false, "", "", gpus_per_replica_, State::PENDING, 0, now_});
  if (int64_t(active.size()) > replicas_) {
    auto rank = [&](size_t i) {
      const Pod& p = pods_[i];
      return p.node.empty() ? 0 : p.state != State::READY ? 1 : 2;
    };
    std::sort(active.begin(), active.end(), [&](size_t a, size_t b) {
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      return pods_[a].created > pods_[b].created;
    });
    for (int64_t k = 0; k < int64_t(active.size()) - replicas_; ++k) {
      Pod& p = pods_[active[size_t(k)]];
      p.state = State::TERMINATING;
      p.until = p.node.empty() ? now_ : now_ + timings_.inference_stop_seconds;
    }
  }
}

void SimulatedCluster::advance_to(double t) {
  now_ = t;
  for (Pod& p : pods_)
    if (p.state == State::STARTING && p.until <= t) p.state = State::READY;
  pods_.erase(std::remove_if(pods_.begin(), pods_.end(),
                             [&](const Pod& p) { return p.state == State::TERMINATING && p.until <= t; }),
              pods_.end());
  reconcile_deployment();
  schedule();
}

lending::WorkloadObservation SimulatedCluster::workload() const {
  lending::WorkloadObservation w;
  w.exists = w.opted_in = true;
  w.replicas = replicas_;
  w.serving_replicas = serving_annotation_;
  w.replicas_set = replicas_set_;
  for (const Pod& p : pods_) {
    if (p.job) continue;
    ++w.pods;
    if (p.state == State::READY) ++w.ready_replicas;
    if (p.state == State::PENDING && p.node.empty()) ++w.unschedulable_pods;
  }
  return w;
}

int64_t SimulatedCluster::ready_replicas() const {
  int64_t n = 0;
  for (const Pod& p : pods_) n += !p.job && p.state == State::READY ? 1 : 0;
  return n;
}

std::vector<lending::NodeObservation> SimulatedCluster::nodes() const {
  std::vector<lending::NodeObservation> out;
  for (const SimNode& n : nodes_) out.push_back({n.name, true, true, n.gpus});
  return out;
}

std::vector<lending::PodObservation> SimulatedCluster::pods() const {
  std::vector<lending::PodObservation> out;
  for (const Pod& p : pods_) out.push_back({p.node, p.gpus, false, p.job});
  return out;
}

void SimulatedCluster::scale_workload(int64_t replicas, int64_t serving_annotation, int64_t replicas_set) {
  replicas_ = replicas;
  serving_annotation_ = serving_annotation;
  replicas_set_ = replicas_set;
  reconcile_deployment();
  schedule();
}

void SimulatedCluster::stop_job() {
  for (Pod& p : pods_) {
    if (!p.job || p.state == State::TERMINATING) continue;
    p.state = State::TERMINATING;
    p.until = p.node.empty() ? now_ : now_ + timings_.checkpoint_seconds;
  }
}

void SimulatedCluster::start_job(const std::vector<std::pair<std::string, int64_t>>& ranks) {
  for (const auto& [node, gpus] : ranks) pods_.push_back({true, node, "", gpus, State::PENDING, 0, now_});
  schedule();
}

bool SimulatedCluster::job_has_pods() const {
  return std::any_of(pods_.begin(), pods_.end(), [](const Pod& p) { return p.job; });
}

bool SimulatedCluster::job_training() const {
  bool any = false;
  for (const Pod& p : pods_) {
    if (!p.job) continue;
    if (p.state != State::READY) return false;
    any = true;
  }
  return any;
}

int64_t SimulatedCluster::job_gpus_on(const std::vector<std::string>& nodes) const {
  int64_t n = 0;
  for (const Pod& p : pods_)
    if (p.job && std::find(nodes.begin(), nodes.end(), p.node) != nodes.end()) n += p.gpus;
  return n;
}

}  // namespace qsync::lending_sim
