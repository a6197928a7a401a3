// File: tests/operator/controller/manager_test.cpp
// The manager without an API server (scripted sources, no leader election): controllers start
// once the caches sync, probes and metrics are served, shutdown (request or SIGTERM) lets an
// in-flight reconcile finish, and caches that never sync make run() fail with the informer's name.
#include "operator/controller/manager.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <future>
#include <thread>

#include "tests/operator/controller/fake_list_watcher.h"
#include "tests/operator/controller/quick_informer_options.h"
#include "tests/operator/wait_until.h"
#include "tests/support/http_client.h"
#include "tests/support/metrics_text.h"

namespace qsync::controller {
namespace {

using controller_test::FakeListWatcher;
using controller_test::make_object;
using std::chrono::milliseconds;

InformerOptions quick_informer(const std::string& name) {
  InformerOptions o = controller_test::quick_informer_options(name);
  o.max_backoff = milliseconds(20);
  return o;
}

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(5000)); }

ManagerOptions served_options() {
  ManagerOptions o;
  o.health_probe_bind_address = "127.0.0.1";
  o.health_probe_port = 0;
  o.metrics_bind_address = "127.0.0.1";
  o.metrics_port = 0;
  o.graceful_shutdown_timeout = std::chrono::seconds(5);
  return o;
}

TEST(Manager, RunsControllersServesProbesAndShutsDownGracefully) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  source->fail_next_lists(3);  // the first lists fail: not ready until one succeeds
  Manager manager(nullptr, served_options());
  Informer& informer = manager.add_informer(source, quick_informer("things"));
  std::atomic<int> reconciles{0};
  std::atomic<bool> in_flight{false}, finished{false};
  ControllerOptions options;
  options.name = "things";
  Controller& controller = manager.add_controller(std::move(options), [&](const std::string& key) {
    if (key == "ns/slow") {
      in_flight = true;
      std::this_thread::sleep_for(milliseconds(300));
      finished = true;
    }
    ++reconciles;
    return ReconcileResult{};
  });
  controller.watch_for(informer);

  const int health_port = manager.health_server()->port();
  EXPECT_EQ(test::http_get("127.0.0.1", health_port, "/readyz").status, 500) << "not running yet";
  auto run = std::async(std::launch::async, [&] { manager.run(); });
  ASSERT_TRUE(eventually([&] { return reconciles.load() == 1; }));
  EXPECT_TRUE(manager.is_leader()) << "without leader election the manager leads at once";
  EXPECT_EQ(test::http_get("127.0.0.1", health_port, "/readyz").status, 200);
  EXPECT_EQ(test::http_get("127.0.0.1", health_port, "/healthz").status, 200);
  const auto scraped = test::http_get("127.0.0.1", manager.metrics().port(), "/metrics");
  const auto samples = test::parse_metrics_text(scraped.body);
  const test::MetricSample* total =
      test::find_sample(samples, "controller_runtime_reconcile_total", {{"controller", "things"}, {"result", "success"}});
  ASSERT_NE(total, nullptr) << scraped.body;
  EXPECT_EQ(total->value, 1);

  source->upsert(make_object("ns", "slow"));
  ASSERT_TRUE(eventually([&] { return in_flight.load(); }));
  manager.shutdown_signal().request();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  run.get();
  EXPECT_TRUE(finished.load()) << "shutdown waits for the in-flight reconcile";
  EXPECT_FALSE(manager.is_leader());
}

TEST(Manager, SigtermStopsRun) {
  auto source = std::make_shared<FakeListWatcher>();
  Manager manager(nullptr, ManagerOptions{});
  manager.add_informer(source, quick_informer("things"));
  manager.shutdown_signal().install_signal_handlers();
  auto run = std::async(std::launch::async, [&] { manager.run(); });
  ASSERT_TRUE(eventually([&] { return manager.is_leader(); }));
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_EQ(run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  run.get();
}

TEST(Manager, CachesThatNeverSyncFailRunNamingTheInformer) {
  auto source = std::make_shared<FakeListWatcher>();
  source->fail_next_lists(1000000);
  ManagerOptions options;
  options.cache_sync_timeout = milliseconds(200);
  Manager manager(nullptr, options);
  manager.add_informer(source, quick_informer("unreachable-pods"));
  ControllerOptions controller;
  controller.name = "never";
  manager.add_controller(std::move(controller), [](const std::string&) { return ReconcileResult{}; });
  try {
    manager.run();
    FAIL() << "run() returned although no cache synced";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unreachable-pods"), std::string::npos) << e.what();
  }
}

TEST(Manager, LeaderElectionNeedsAClient) {
  ManagerOptions options;
  options.leader_election = true;
  options.leader_election_options.lease_name = "lease";
  EXPECT_THROW(Manager(nullptr, options), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::controller
