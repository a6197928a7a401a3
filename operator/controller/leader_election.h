// File: operator/controller/leader_election.h
// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection with
// controller-runtime's defaults (lease 15 s, renew deadline 10 s, retry 2 s). Candidates read the
// Lease every retry period; one takes it when it is free (no holder, or released) or when its
// holder has not renewed it for leaseDurationSeconds as observed by this candidate's own clock
// (so clock skew between machines does not matter). The leader renews spec.renewTime every retry
// period and steps down when it could not renew for the renew deadline. Writes carry the Lease's
// resourceVersion: a candidate that lost a race gets 409 Conflict and tries again next period.
// stop() releases the Lease (empties spec.holderIdentity) so another candidate takes over at once.
//
// Callbacks run on the elector's thread and must return quickly.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "operator/kube/kube_client.h"

namespace qsync::controller {

class OperatorMetrics;

struct LeaderElectionOptions {
  std::string lease_namespace = "default";
  std::string lease_name;                 // e.g. "qsync-operator-leader"
  std::string identity;                   // empty: HOSTNAME_RANDOM
  std::chrono::milliseconds lease_duration = std::chrono::seconds(15);
  std::chrono::milliseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::milliseconds retry_period = std::chrono::seconds(2);
  bool release_on_cancel = true;
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;  // leadership lost, or released by stop()
  std::function<void(const std::string& identity)> on_new_leader;  // a different holder observed
  OperatorMetrics* metrics = nullptr;        // leader_election_master_status{name=lease_name}
};

class LeaderElector {
 public:
  // Throws std::invalid_argument when the durations are not lease > renew deadline > 1.2 x retry,
  // or the lease has no name.
  LeaderElector(kube::KubeClient& client, LeaderElectionOptions options);
  ~LeaderElector();  // stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void start();
  // Steps down (releasing the Lease when leading and release_on_cancel) and joins the thread.
  void stop();

  bool is_leader() const { return leading_.load(); }
  std::string leader() const;  // the holder last observed ("" when none)
  const std::string& identity() const { return options_.identity; }

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  bool try_acquire_or_renew();
  void observe(const nlohmann::json& spec, Clock::time_point now);
  void release();
  void set_leading(bool leading);
  bool sleep_unless_stopped(std::chrono::milliseconds duration);

  kube::KubeClient& client_;
  LeaderElectionOptions options_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards the observed_* fields and stop waits
  std::condition_variable stop_cv_;
  std::string observed_spec_;   // the Lease spec last read, to notice renewals
  std::string observed_holder_;
  Clock::time_point observed_time_;
  std::thread thread_;
};

}  // namespace qsync::controller
