// File: tests/operator/controller/controller_test.cpp
// The controller: informer events become reconciles; N events for one key collapse; errors are
// retried with growing backoff; requeue_after; TerminalError is not retried; non-standard
// exceptions are recovered; owned children map to their owner's key; the worker count bounds
// concurrency; the generation-changed predicate; metrics; graceful stop.
#include "operator/controller/controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "operator/controller/operator_metrics.h"
#include "operator/controller/owner_refs.h"
#include "tests/operator/controller/fake_list_watcher.h"
#include "tests/operator/controller/quick_informer_options.h"
#include "tests/operator/wait_until.h"
#include "tests/support/metrics_text.h"

namespace qsync::controller {
namespace {

using controller_test::FakeListWatcher;
using controller_test::make_object;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

InformerOptions quick_informer() { return controller_test::quick_informer_options("things"); }

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(5000)); }

// Reconcile calls, with their times, recorded thread-safely.
class CallLog {
 public:
  void record(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({key, Clock::now()});
  }
  size_t count(const std::string& key = "") const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::count_if(calls_.begin(), calls_.end(), [&](const auto& c) { return key.empty() || c.first == key; });
  }
  std::vector<Clock::time_point> times() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Clock::time_point> t;
    for (const auto& c : calls_) t.push_back(c.second);
    return t;
  }
  std::vector<std::string> keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> k;
    for (const auto& c : calls_) k.push_back(c.first);
    return k;
  }
  // A reconcile function that only records its key and succeeds.
  Reconciler reconciler() {
    return [this](const std::string& key) {
      record(key);
      return ReconcileResult{};
    };
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, Clock::time_point>> calls_;
};

ControllerOptions options_named(const std::string& name, int workers = 1, OperatorMetrics* metrics = nullptr) {
  ControllerOptions o;
  o.name = name;
  o.max_concurrent_reconciles = workers;
  o.rate_limiter = std::make_unique<ItemExponentialRateLimiter>(milliseconds(20), std::chrono::seconds(10));
  o.metrics = metrics;
  return o;
}

double sample(const OperatorMetrics& metrics, const std::string& name, const std::map<std::string, std::string>& labels) {
  const auto samples = test::parse_metrics_text(metrics.scrape());
  const test::MetricSample* s = test::find_sample(samples, name, labels);
  return s ? s->value : -1;
}

TEST(Controller, InformerEventsBecomeReconciles) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  Informer informer(source, quick_informer());
  CallLog log;
  Controller c(options_named("things"), log.reconciler());
  c.watch_for(informer);
  informer.start();
  c.start();
  ASSERT_TRUE(eventually([&] { return log.count("ns/a") == 1; }));
  source->upsert(make_object("ns", "b"));
  ASSERT_TRUE(eventually([&] { return log.count("ns/b") == 1; }));
  source->erase("ns", "a");
  ASSERT_TRUE(eventually([&] { return log.count("ns/a") == 2; })) << "a delete reconciles too";
}

TEST(Controller, ManyEventsForOneKeyCollapseIntoOneReconcile) {
  auto source = std::make_shared<FakeListWatcher>();
  Informer informer(source, quick_informer());
  CallLog log;
  Controller c(options_named("things"), log.reconciler());
  c.watch_for(informer);
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  for (int i = 0; i < 50; ++i) source->upsert(make_object("ns", "a", {{"i", i}}));
  ASSERT_TRUE(eventually([&] { return informer.last_resource_version() == source->current_resource_version(); }));
  EXPECT_EQ(c.queue().len(), 1);
  c.start();
  ASSERT_TRUE(eventually([&] { return log.count() >= 1; }));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(log.count(), 1u);
}

TEST(Controller, ErrorsAreRetriedWithGrowingBackoffThenForgotten) {
  OperatorMetrics metrics;
  std::atomic<int> calls{0};
  CallLog log;
  Controller c(options_named("flaky", 1, &metrics), [&](const std::string& key) -> ReconcileResult {
    log.record(key);
    if (++calls <= 3) throw std::runtime_error("the API server said no");
    return {};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return log.count() == 4; }));
  const auto t = log.times();
  EXPECT_GE(t[1] - t[0], milliseconds(20));
  EXPECT_GE(t[2] - t[1], milliseconds(40));
  EXPECT_GE(t[3] - t[2], milliseconds(80));
  ASSERT_TRUE(eventually([&] { return c.queue().num_requeues("ns/a") == 0; })) << "success forgets the backoff";
  c.stop();
  EXPECT_EQ(sample(metrics, "controller_runtime_reconcile_errors_total", {{"controller", "flaky"}}), 3);
  EXPECT_EQ(sample(metrics, "controller_runtime_reconcile_total", {{"controller", "flaky"}, {"result", "error"}}), 3);
  EXPECT_EQ(sample(metrics, "controller_runtime_reconcile_total", {{"controller", "flaky"}, {"result", "success"}}), 1);
  EXPECT_EQ(sample(metrics, "workqueue_retries_total", {{"name", "flaky"}}), 3);
  EXPECT_EQ(sample(metrics, "controller_runtime_max_concurrent_reconciles", {{"controller", "flaky"}}), 1);
}

TEST(Controller, RequeueAfterRunsTheKeyAgainLater) {
  CallLog log;
  Controller c(options_named("periodic"), [&](const std::string& key) -> ReconcileResult {
    log.record(key);
    if (log.count() == 1) return {.requeue = false, .requeue_after = milliseconds(150)};
    return {};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return log.count() == 2; }));
  const auto t = log.times();
  EXPECT_GE(t[1] - t[0], milliseconds(150));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(log.count(), 2u);
}

TEST(Controller, RequeueUsesTheRateLimiter) {
  CallLog log;
  Controller c(options_named("again"), [&](const std::string& key) -> ReconcileResult {
    log.record(key);
    return {.requeue = log.count() < 3, .requeue_after = std::nullopt};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return log.count() == 3; }));
  const auto t = log.times();
  EXPECT_GE(t[2] - t[1], milliseconds(40)) << "the second requeue backs off twice as long";
}

TEST(Controller, TerminalErrorIsNotRetried) {
  OperatorMetrics metrics;
  CallLog log;
  Controller c(options_named("strict", 1, &metrics), [&](const std::string& key) -> ReconcileResult {
    log.record(key);
    throw TerminalError("spec.replicas must be positive");
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return log.count() == 1; }));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(log.count(), 1u);
  EXPECT_EQ(c.queue().num_requeues("ns/a"), 0);
  c.stop();
  EXPECT_EQ(sample(metrics, "controller_runtime_terminal_reconcile_errors_total", {{"controller", "strict"}}), 1);
}

TEST(Controller, NonStandardExceptionIsRecoveredAndRetried) {
  OperatorMetrics metrics;
  CallLog log;
  Controller c(options_named("panicky", 1, &metrics), [&](const std::string& key) -> ReconcileResult {
    log.record(key);
    if (log.count() == 1) throw 42;
    return {};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return log.count() == 2; }));
  c.stop();
  EXPECT_EQ(sample(metrics, "controller_runtime_reconcile_panics_total", {{"controller", "panicky"}}), 1);
}

TEST(Controller, OwnedChildrenMapToTheirControllingOwner) {
  auto owners = std::make_shared<FakeListWatcher>();
  auto children = std::make_shared<FakeListWatcher>();
  Informer owner_informer(owners, quick_informer());
  Informer child_informer(children, quick_informer());
  CallLog log;
  Controller c(options_named("jobs"), log.reconciler());
  c.watch_for(owner_informer);
  c.watch_owned(child_informer, "qsync.io/v1alpha1", "HybridTrainingJob");
  owner_informer.start();
  child_informer.start();
  c.start();

  json owner = make_object("ns", "job-1");
  owner["apiVersion"] = "qsync.io/v1alpha1";
  owner["kind"] = "HybridTrainingJob";
  owner["metadata"]["uid"] = "uid-1";
  owner = owners->upsert(owner);
  ASSERT_TRUE(eventually([&] { return log.count("ns/job-1") == 1; }));

  json pod = make_object("ns", "job-1-worker-0");
  set_controller_reference(pod, owner);
  children->upsert(pod);
  ASSERT_TRUE(eventually([&] { return log.count("ns/job-1") == 2; }));

  json orphan = make_object("ns", "orphan");
  children->upsert(orphan);
  json other = make_object("ns", "other-owned");
  other["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "apps/v1"}, {"kind", "ReplicaSet"}, {"name", "rs"}, {"uid", "u"}, {"controller", true}}});
  children->upsert(other);
  children->erase("ns", "job-1-worker-0");
  ASSERT_TRUE(eventually([&] { return log.count("ns/job-1") == 3; })) << "a child's delete reaches the owner";
  std::this_thread::sleep_for(milliseconds(100));
  for (const std::string& key : log.keys()) EXPECT_EQ(key, "ns/job-1");
}

TEST(Controller, WorkerCountBoundsConcurrency) {
  std::atomic<int> running{0}, most{0};
  std::mutex keys_mu;
  std::set<std::string> in_flight;
  bool same_key_twice = false;
  CallLog log;
  Controller c(options_named("parallel", 3), [&](const std::string& key) {
    {
      std::lock_guard<std::mutex> lock(keys_mu);
      if (!in_flight.insert(key).second) same_key_twice = true;
    }
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(milliseconds(40));
    --running;
    {
      std::lock_guard<std::mutex> lock(keys_mu);
      in_flight.erase(key);
    }
    log.record(key);
    return ReconcileResult{};
  });
  for (const char* key : {"ns/k0", "ns/k1", "ns/k2", "ns/k3", "ns/k4", "ns/k5", "ns/k6", "ns/k7", "ns/k8"}) {
    c.queue().add(key);
  }
  c.start();
  ASSERT_TRUE(eventually([&] { return log.count() == 9; }));
  EXPECT_EQ(most.load(), 3);
  EXPECT_FALSE(same_key_twice);
}

TEST(Controller, GenerationChangedPredicateSkipsStatusOnlyUpdates) {
  auto source = std::make_shared<FakeListWatcher>();
  Informer informer(source, quick_informer());
  CallLog log;
  Controller c(options_named("gen"), log.reconciler());
  c.watch_for(informer, {generation_changed_predicate()});
  informer.start();
  c.start();
  json o = make_object("ns", "a");
  o["metadata"]["generation"] = 1;
  source->upsert(o);
  ASSERT_TRUE(eventually([&] { return log.count() == 1; })) << "creates pass";
  o["status"] = {{"phase", "Running"}};
  source->upsert(o);
  ASSERT_TRUE(eventually([&] { return informer.last_resource_version() == source->current_resource_version(); }));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(log.count(), 1u) << "a status-only update keeps the generation";
  o["metadata"]["generation"] = 2;
  source->upsert(o);
  ASSERT_TRUE(eventually([&] { return log.count() == 2; }));
  source->erase("ns", "a");
  ASSERT_TRUE(eventually([&] { return log.count() == 3; })) << "deletes pass";
}

TEST(Controller, StopLetsInFlightReconcilesFinishWithinGrace) {
  std::atomic<bool> finished{false};
  std::atomic<bool> started{false};
  Controller c(options_named("slow"), [&](const std::string&) {
    started = true;
    std::this_thread::sleep_for(milliseconds(200));
    finished = true;
    return ReconcileResult{};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  EXPECT_TRUE(c.stop(std::chrono::seconds(5)));
  EXPECT_TRUE(finished.load());
}

TEST(Controller, StopReportsReconcilesOutlivingTheGrace) {
  std::atomic<bool> started{false};
  Controller c(options_named("slower"), [&](const std::string&) {
    started = true;
    std::this_thread::sleep_for(milliseconds(300));
    return ReconcileResult{};
  });
  c.start();
  c.queue().add("ns/a");
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  EXPECT_FALSE(c.stop(milliseconds(10)));
  EXPECT_EQ(c.active_workers(), 1);
}

TEST(Controller, RejectsBadOptions) {
  auto ok = [](const std::string&) { return ReconcileResult{}; };
  EXPECT_THROW(Controller(options_named(""), ok), std::invalid_argument);
  EXPECT_THROW(Controller(options_named("x", 0), ok), std::invalid_argument);
  EXPECT_THROW(Controller(options_named("x"), nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::controller
