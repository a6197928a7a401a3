// File: operator/controller/manager.cpp
// Starting and stopping informers, controllers, leader election and the probe/metrics servers.
#include "operator/controller/manager.h"

#include <cstdio>
#include <stdexcept>

namespace qsync::controller {

Manager::Manager(kube::KubeClient* client, ManagerOptions options, std::shared_ptr<OperatorMetrics> metrics)
    : client_(client), options_(std::move(options)), metrics_(std::move(metrics)) {
  if (!metrics_) metrics_ = std::make_shared<OperatorMetrics>();
  if (options_.leader_election && !client_) {
    throw std::invalid_argument("Manager: leader election needs a KubeClient to read and write its Lease");
  }
  if (options_.metrics_port >= 0) metrics_->serve(options_.metrics_bind_address, options_.metrics_port);
  if (options_.health_probe_port >= 0) {
    health_ = std::make_unique<HealthServer>(options_.health_probe_bind_address, options_.health_probe_port);
    health_->add_ready_check("informers-synced", [this]() -> std::optional<std::string> {
      std::string unsynced;
      if (all_informers_synced(&unsynced)) return std::nullopt;
      return "informer " + unsynced + " has not listed yet";
    });
    health_->add_ready_check("leader-election", [this]() -> std::optional<std::string> {
      if (running_ && !stopping_) return std::nullopt;  // leader or standby: both serve
      return std::string(stopping_ ? "the manager is shutting down" : "the manager is not running yet");
    });
  }
}

Manager::~Manager() { stop_all(); }

Informer& Manager::informer_for(const kube::ResourceType& type, const std::string& ns, const std::string& label_selector) {
  if (!client_) throw std::logic_error("Manager::informer_for needs a KubeClient; use add_informer without one");
  const std::string key = type.api_version() + "/" + type.plural + "|" + ns + "|" + label_selector;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = informers_.find(key);
  if (it != informers_.end()) return *it->second;
  InformerOptions options = options_.informer_defaults;
  options.name = (ns.empty() ? type.plural : type.plural + "/" + ns) + (label_selector.empty() ? "" : "{" + label_selector + "}");
  auto informer = std::make_unique<Informer>(std::make_shared<KubeListWatcher>(*client_, type, ns, label_selector), options);
  Informer& ref = *informer;
  informers_[key] = std::move(informer);
  if (running_) ref.start();
  return ref;
}

Informer& Manager::add_informer(std::shared_ptr<ListWatcher> source, InformerOptions options) {
  auto informer = std::make_unique<Informer>(std::move(source), std::move(options));
  Informer& ref = *informer;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = "source:" + ref.name() + "#" + std::to_string(informers_.size());
  informers_[key] = std::move(informer);
  if (running_) ref.start();
  return ref;
}

Controller& Manager::add_controller(ControllerOptions options, Reconciler reconcile) {
  if (!options.metrics) options.metrics = metrics_.get();
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) throw std::logic_error("Manager: add controller '" + options.name + "' before run()");
  controllers_.push_back(std::make_unique<Controller>(std::move(options), std::move(reconcile)));
  return *controllers_.back();
}

bool Manager::all_informers_synced(std::string* unsynced) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, informer] : informers_) {
    if (!informer->has_synced()) {
      if (unsynced) *unsynced = informer->name();
      return false;
    }
  }
  return true;
}

void Manager::run() {
  if (running_.exchange(true)) throw std::logic_error("Manager::run called twice");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, informer] : informers_) informer->start();
  }
  if (options_.leader_election) {
    LeaderElectionOptions le = options_.leader_election_options;
    le.metrics = metrics_.get();
    le.on_started_leading = [this] { leading_ = true; };
    le.on_stopped_leading = [this] {
      leading_ = false;
      if (!stopping_) {
        lost_leadership_ = true;
        shutdown_.request();
      }
    };
    elector_ = std::make_unique<LeaderElector>(*client_, le);
    elector_->start();
  } else {
    leading_ = true;
  }

  std::string failure;
  std::chrono::steady_clock::time_point sync_deadline{};
  bool waiting_for_sync = false;
  while (!shutdown_.wait_for(std::chrono::milliseconds(50))) {
    if (!leading_ || controllers_running_) continue;
    if (!waiting_for_sync) {
      waiting_for_sync = true;
      sync_deadline = std::chrono::steady_clock::now() + options_.cache_sync_timeout;
    }
    std::string unsynced;
    if (all_informers_synced(&unsynced)) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& controller : controllers_) controller->start();
      controllers_running_ = true;
    } else if (std::chrono::steady_clock::now() > sync_deadline) {
      failure = "informer " + unsynced + " did not sync within the cache sync timeout (" +
                std::to_string(options_.cache_sync_timeout.count()) +
                " ms): check that the API server is reachable and that the operator may list and watch it";
      break;
    }
  }
  stop_all();
  if (lost_leadership_) failure = "leader election lost: another operator holds the Lease now";
  if (!failure.empty()) throw std::runtime_error("manager: " + failure);
}

void Manager::stop_all() {
  if (stopping_.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() + options_.graceful_shutdown_timeout;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& controller : controllers_) {
    if (!controller->started()) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    controller->stop(std::max(left, std::chrono::milliseconds(0)));
  }
  controllers_running_ = false;
  if (elector_) elector_->stop();  // releases the Lease: a standby takes over at once
  for (auto& [key, informer] : informers_) informer->stop();
  if (health_) health_->stop();
}

}  // namespace qsync::controller
