// File: operator/controller/manager.h
// The manager, as controller-runtime's: owns the shared informers (one per resource type and
// namespace), the controllers, leader election, the health probes and the metrics endpoint.
// run() starts the informers at once (a standby keeps a warm cache), and the controllers only
// while this process leads (with leader election on) and once every informer has synced. On
// shutdown (SIGTERM/SIGINT once install_signal_handlers() ran, or shutdown_signal().request()) it
// stops the controllers, letting in-flight reconciles finish within the grace period (30 s),
// releases the Lease so a standby takes over at once, and stops the informers.
//
//   Manager m(&client, {.health_probe_port = 8081, .metrics_port = 8080, .leader_election = true,
//                       .leader_election_options = {.lease_namespace = "qsync-system",
//                                                   .lease_name = "qsync-operator-leader"}});
//   Controller& c = m.add_controller({.name = "hybridtrainingjob"}, reconcile);
//   c.watch_for(m.informer_for(jobs_type));
//   m.shutdown_signal().install_signal_handlers();
//   m.run();
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "operator/controller/controller.h"
#include "operator/controller/health_server.h"
#include "operator/controller/informer.h"
#include "operator/controller/leader_election.h"
#include "operator/controller/operator_metrics.h"
#include "operator/controller/shutdown_signal.h"
#include "operator/kube/kube_client.h"

namespace qsync::controller {

struct ManagerOptions {
  std::string health_probe_bind_address = "0.0.0.0";
  int health_probe_port = -1;             // negative: no probe server; 0: any free port
  std::string metrics_bind_address = "0.0.0.0";
  int metrics_port = -1;                  // negative: no /metrics endpoint; 0: any free port
  bool leader_election = false;
  LeaderElectionOptions leader_election_options;  // its callbacks and metrics are the manager's
  std::chrono::milliseconds graceful_shutdown_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds cache_sync_timeout = std::chrono::minutes(2);
  InformerOptions informer_defaults;      // for informer_for(); the name is set per type
};

class Manager {
 public:
  // `client` may be null when there is no leader election and informers come from
  // add_informer(). `metrics` null: the manager makes its own (pass one to share it with the
  // client's observer). Binds the probe and metrics ports now; throws std::runtime_error naming
  // an address it cannot bind.
  Manager(kube::KubeClient* client, ManagerOptions options, std::shared_ptr<OperatorMetrics> metrics = nullptr);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // The shared informer of `type` in `ns` ("" : all namespaces) over the objects that match
  // `label_selector` ("": all), made on first use.
  Informer& informer_for(const kube::ResourceType& type, const std::string& ns = "", const std::string& label_selector = "");
  // An informer over any source (tests, selectors).
  Informer& add_informer(std::shared_ptr<ListWatcher> source, InformerOptions options);
  // A controller; its metrics default to the manager's. Add controllers before run().
  Controller& add_controller(ControllerOptions options, Reconciler reconcile);

  OperatorMetrics& metrics() { return *metrics_; }
  ShutdownSignal& shutdown_signal() { return shutdown_; }
  HealthServer* health_server() { return health_.get(); }  // null without a probe port
  bool is_leader() const { return controllers_running_.load(); }

  // Blocks until shutdown. Throws std::runtime_error when the caches do not sync within
  // cache_sync_timeout or leadership is lost (the process should exit and restart, as a
  // controller-runtime manager does).
  void run();

 private:
  bool all_informers_synced(std::string* unsynced) const;
  void stop_all();

  kube::KubeClient* client_;
  ManagerOptions options_;
  std::shared_ptr<OperatorMetrics> metrics_;
  ShutdownSignal shutdown_;
  std::unique_ptr<HealthServer> health_;

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Informer>> informers_;  // by "apiVersion/plural|namespace" or name
  std::vector<std::unique_ptr<Controller>> controllers_;
  std::unique_ptr<LeaderElector> elector_;

  std::atomic<bool> running_{false};
  std::atomic<bool> leading_{false};
  std::atomic<bool> lost_leadership_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> controllers_running_{false};
};

}  // namespace qsync::controller
