// File: tests/operator/controller/leader_election_test.cpp
// Lease leader election against the Kubernetes API test server: of two candidates exactly one
// leads; when the leader stops without releasing, the other takes over once the lease expires;
// when it releases, the other takes over at once; a Conflict on renewal is retried; renewals
// failing past the deadline lose leadership. Short durations (lease 1 s, renew 0.7 s, retry 0.1 s).
#include "operator/controller/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "operator/controller/micro_time.h"
#include "operator/controller/operator_metrics.h"
#include "tests/operator/api_server_fixture.h"
#include "tests/operator/wait_until.h"
#include "tests/support/metrics_text.h"

namespace qsync::controller {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(10000)); }

class LeaderElectionTest : public operator_test::ApiServerTest {
 protected:
  LeaderElectionOptions candidate(const std::string& identity, milliseconds lease = milliseconds(1000),
                                  milliseconds renew = milliseconds(700)) {
    LeaderElectionOptions o;
    o.lease_namespace = "default";
    o.lease_name = "qsync-operator-leader";
    o.identity = identity;
    o.lease_duration = lease;
    o.renew_deadline = renew;
    o.retry_period = milliseconds(100);
    return o;
  }

  nlohmann::json lease() { return server_.get_object("coordination.k8s.io/v1", "leases", "default", "qsync-operator-leader"); }
};

TEST_F(LeaderElectionTest, ExactlyOneOfTwoCandidatesLeads) {
  std::atomic<int> a_started{0}, b_started{0};
  std::mutex seen_mu;
  std::vector<std::string> a_saw;
  LeaderElectionOptions a_options = candidate("a");
  a_options.on_started_leading = [&] { ++a_started; };
  a_options.on_new_leader = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(seen_mu);
    a_saw.push_back(id);
  };
  LeaderElectionOptions b_options = candidate("b");
  b_options.on_started_leading = [&] { ++b_started; };
  LeaderElector a(*client_, a_options);
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  LeaderElector b(*client_, b_options);
  b.start();
  // Several lease durations: the leader keeps renewing, the other keeps waiting.
  for (int i = 0; i < 25; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE(a.is_leader());
    EXPECT_FALSE(b.is_leader());
  }
  EXPECT_EQ(a_started.load(), 1);
  EXPECT_EQ(b_started.load(), 0);
  EXPECT_EQ(b.leader(), "a");
  {
    std::lock_guard<std::mutex> lock(seen_mu);
    EXPECT_EQ(a_saw, std::vector<std::string>{"a"});
  }
  const nlohmann::json spec = lease()["spec"];
  EXPECT_EQ(spec["holderIdentity"], "a");
  EXPECT_EQ(spec["leaseDurationSeconds"], 1);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  EXPECT_NO_THROW(micro_time_parse(spec["renewTime"].get<std::string>()));
  EXPECT_EQ(spec["renewTime"].get<std::string>().size(), std::string("2026-11-29T20:31:50.123456Z").size());
  const auto renewed = micro_time_parse(spec["renewTime"].get<std::string>());
  EXPECT_LT(std::chrono::system_clock::now() - renewed, std::chrono::seconds(5)) << "the leader keeps renewing";
}

TEST_F(LeaderElectionTest, StandbyTakesOverAfterTheLeaseExpiresWhenTheLeaderDiesWithoutRelease) {
  LeaderElectionOptions a_options = candidate("a");
  a_options.release_on_cancel = false;  // as a crash: the Lease keeps naming "a"
  LeaderElector a(*client_, a_options);
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  LeaderElector b(*client_, candidate("b"));
  b.start();
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_FALSE(b.is_leader());
  const auto stopped = Clock::now();
  a.stop();
  ASSERT_TRUE(eventually([&] { return b.is_leader(); }));
  const auto takeover = Clock::now() - stopped;
  EXPECT_GE(takeover, milliseconds(500)) << "b must wait for the 1 s lease to expire";
  EXPECT_LE(takeover, milliseconds(10000));
  EXPECT_EQ(lease()["spec"]["holderIdentity"], "b");
  EXPECT_EQ(lease()["spec"]["leaseTransitions"], 1);
}

TEST_F(LeaderElectionTest, ReleaseOnStopHandsOverAtOnce) {
  // A 3 s lease: a takeover well under it shows b did not wait for expiry.
  LeaderElector a(*client_, candidate("a", milliseconds(3000), milliseconds(2000)));
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  LeaderElector b(*client_, candidate("b", milliseconds(3000), milliseconds(2000)));
  b.start();
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_FALSE(b.is_leader());
  const auto stopped = Clock::now();
  a.stop();
  EXPECT_FALSE(a.is_leader());
  ASSERT_TRUE(eventually([&] { return b.is_leader(); }));
  EXPECT_LT(Clock::now() - stopped, milliseconds(2500)) << "a released Lease is taken at the next retry";
  EXPECT_EQ(lease()["spec"]["holderIdentity"], "b");
}

TEST_F(LeaderElectionTest, ConflictsOnRenewalAreRetried) {
  std::atomic<int> stopped_leading{0};
  LeaderElectionOptions options = candidate("a");
  options.on_stopped_leading = [&] { ++stopped_leading; };
  LeaderElector a(*client_, options);
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  kube_test::FaultRule conflict;
  conflict.verb = "update";
  conflict.path_contains = "/leases/";
  conflict.code = 409;
  conflict.remaining = 2;
  server_.fail_next(conflict);
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_TRUE(a.is_leader());
  EXPECT_EQ(stopped_leading.load(), 0);
  const auto renewed = micro_time_parse(lease()["spec"]["renewTime"].get<std::string>());
  EXPECT_LT(std::chrono::system_clock::now() - renewed, std::chrono::seconds(5));
}

TEST_F(LeaderElectionTest, RenewalsFailingPastTheDeadlineLoseLeadership) {
  OperatorMetrics metrics;
  std::atomic<int> stopped_leading{0};
  LeaderElectionOptions options = candidate("a");
  options.on_stopped_leading = [&] { ++stopped_leading; };
  options.metrics = &metrics;
  LeaderElector a(*client_, options);
  a.start();
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  auto leader_status = [&] {
    const auto samples = test::parse_metrics_text(metrics.scrape());
    const test::MetricSample* s = test::find_sample(samples, "leader_election_master_status", {{"name", "qsync-operator-leader"}});
    return s ? s->value : -1;
  };
  EXPECT_EQ(leader_status(), 1);
  kube_test::FaultRule outage;
  outage.verb = "update";
  outage.path_contains = "/leases/";
  outage.code = 500;
  outage.remaining = 1000000;
  server_.fail_next(outage);
  ASSERT_TRUE(eventually([&] { return stopped_leading.load() == 1; }));
  EXPECT_FALSE(a.is_leader());
  EXPECT_EQ(leader_status(), 0);
  server_.clear_faults();
  // The lease, not renewed, expires; a candidate again, "a" reacquires it.
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
}

TEST_F(LeaderElectionTest, RejectsInconsistentDurations) {
  LeaderElectionOptions o = candidate("a");
  o.renew_deadline = milliseconds(1000);
  EXPECT_THROW(LeaderElector(*client_, o), std::invalid_argument);
  o = candidate("a");
  o.retry_period = milliseconds(650);
  EXPECT_THROW(LeaderElector(*client_, o), std::invalid_argument);
  o = candidate("a");
  o.lease_name = "";
  EXPECT_THROW(LeaderElector(*client_, o), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::controller
