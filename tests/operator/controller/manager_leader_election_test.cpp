// File: tests/operator/controller/manager_leader_election_test.cpp
// Two managers with leader election against the Kubernetes API test server: both keep warm
// caches, only the leader runs its controller; when the leader shuts down (releasing the Lease)
// the standby starts its controller and reconciles.
#include "operator/controller/manager.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "tests/operator/api_server_fixture.h"
#include "tests/operator/wait_until.h"

namespace qsync::controller {
namespace {

using std::chrono::milliseconds;

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(10000)); }

struct Operator {
  std::unique_ptr<kube::KubeClient> client;
  std::unique_ptr<Manager> manager;
  std::atomic<int> reconciles{0};
  std::future<void> run;

  Operator(const std::string& server, const std::string& identity) {
    client = operator_test::make_test_client(server);
    ManagerOptions options;
    options.leader_election = true;
    options.leader_election_options.lease_namespace = "default";
    options.leader_election_options.lease_name = "qsync-operator-leader";
    options.leader_election_options.identity = identity;
    options.leader_election_options.lease_duration = milliseconds(3000);
    options.leader_election_options.renew_deadline = milliseconds(2000);
    options.leader_election_options.retry_period = milliseconds(100);
    options.graceful_shutdown_timeout = std::chrono::seconds(5);
    options.informer_defaults.resync_period = milliseconds(0);
    options.informer_defaults.initial_backoff = milliseconds(20);
    manager = std::make_unique<Manager>(client.get(), options);
    ControllerOptions controller;
    controller.name = "configmaps";
    Controller& c = manager->add_controller(std::move(controller), [this](const std::string&) {
      ++reconciles;
      return ReconcileResult{};
    });
    c.watch_for(manager->informer_for(kube::config_maps_type(), "default"));
  }
  void start() {
    run = std::async(std::launch::async, [this] { manager->run(); });
  }
  void stop() {
    manager->shutdown_signal().request();
    ASSERT_EQ(run.wait_for(std::chrono::seconds(15)), std::future_status::ready);
    run.get();
  }
};

TEST(ManagerLeaderElection, OnlyTheLeaderReconcilesAndTheStandbyTakesOverOnShutdown) {
  kube_test::ApiServer server;
  server.start();
  server.put_object({{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata", {{"name", "a"}, {"namespace", "default"}}},
                     {"data", {{"k", "v"}}}});
  Operator first(server.url(), "first");
  first.start();
  ASSERT_TRUE(eventually([&] { return first.manager->is_leader() && first.reconciles.load() == 1; }));
  Operator second(server.url(), "second");
  second.start();
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(second.manager->is_leader());
  EXPECT_EQ(second.reconciles.load(), 0) << "a standby must not reconcile";

  first.stop();
  ASSERT_TRUE(eventually([&] { return second.manager->is_leader(); }))
      << "the released Lease was not taken over";
  ASSERT_TRUE(eventually([&] { return second.reconciles.load() == 1; }));
  EXPECT_EQ(server.get_object("coordination.k8s.io/v1", "leases", "default", "qsync-operator-leader")["spec"]
                ["holderIdentity"],
            "second");
  second.stop();
  EXPECT_EQ(server.get_object("coordination.k8s.io/v1", "leases", "default", "qsync-operator-leader")["spec"]
                ["holderIdentity"],
            "")
      << "shutdown releases the Lease";
}

}  // namespace
}  // namespace qsync::controller
