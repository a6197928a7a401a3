// File: tests/operator/controller/informer_test.cpp
// The informer against a scripted ListWatcher: the initial list reaches the handlers; a watch
// that ends resumes from the last resourceVersion with no duplicate; a 410 relists and delivers
// the difference exactly once (DELETED for an object gone during the gap, MODIFIED for a changed
// one, nothing for an unchanged one, ADDED for a new one); repeated events are dropped; list and
// watch transport errors are retried; resync replays the cache.
#include "operator/controller/informer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "tests/operator/controller/fake_list_watcher.h"
#include "tests/operator/controller/quick_informer_options.h"
#include "tests/operator/controller/recorded_events.h"
#include "tests/operator/wait_until.h"

namespace qsync::controller {
namespace {

using controller_test::FakeListWatcher;
using controller_test::make_object;
using std::chrono::milliseconds;

// Records handler calls as "ADDED ns/name rv" lines.
class EventLog : public controller_test::RecordedEvents {
 public:
  EventHandler handler() {
    EventHandler h;
    h.on_add = [this](const json& o) { push("ADDED " + key_of(o) + " " + resource_version_of(o)); };
    h.on_update = [this](const json& old_object, const json& o) {
      push((resource_version_of(old_object) == resource_version_of(o) ? "RESYNC " : "MODIFIED ") + key_of(o) + " " +
           resource_version_of(o));
    };
    h.on_delete = [this](const json& o) { push("DELETED " + key_of(o)); };
    return h;
  }
};

InformerOptions quick_options() {
  InformerOptions o = controller_test::quick_informer_options("configmaps");
  o.max_backoff = milliseconds(40);
  return o;
}

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(5000)); }

// Lets the informer consume whatever is pending, then returns what it recorded.
std::vector<std::string> settle(EventLog& log) {
  std::this_thread::sleep_for(milliseconds(150));
  return log.all();
}

TEST(Informer, DeliversInitialListThenWatchEvents) {
  auto source = std::make_shared<FakeListWatcher>();
  const json a = source->upsert(make_object("ns", "a"));
  const json b = source->upsert(make_object("ns", "b"));
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  EXPECT_FALSE(informer.has_synced());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  EXPECT_EQ(log.wait_for(2), (std::vector<std::string>{"ADDED ns/a 101", "ADDED ns/b 102"}));
  EXPECT_EQ(informer.size(), 2u);
  EXPECT_EQ(informer.get("ns/a")->at("metadata").at("resourceVersion"), "101");

  source->upsert(make_object("ns", "a", {{"x", 1}}));
  source->erase("ns", "b");
  source->upsert(make_object("ns", "c"));
  EXPECT_EQ(log.wait_for(5), (std::vector<std::string>{"ADDED ns/a 101", "ADDED ns/b 102", "MODIFIED ns/a 103",
                                                       "DELETED ns/b", "ADDED ns/c 105"}));
  EXPECT_EQ(informer.get("ns/a")->at("spec").at("x"), 1);
  EXPECT_FALSE(informer.get("ns/b").has_value());
  EXPECT_EQ(informer.last_resource_version(), "105");
  EXPECT_EQ(source->watch_resource_versions().front(), "102") << "the watch starts from the list's version";
  EXPECT_EQ(settle(log).size(), 5u);
}

TEST(Informer, HandlerAddedLateReceivesTheCacheAsAdds) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  Informer informer(source, quick_options());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  EventLog log;
  informer.add_handler(log.handler());
  EXPECT_EQ(log.all(), (std::vector<std::string>{"ADDED ns/a 101"}));
}

TEST(Informer, ResumesFromLastResourceVersionWhenTheWatchEnds) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_EQ(log.wait_for(1).size(), 1u);
  source->upsert(make_object("ns", "b"));
  ASSERT_EQ(log.wait_for(2).size(), 2u);
  source->end_watches();
  ASSERT_TRUE(eventually([&] { return source->watch_calls() >= 2; }));
  source->upsert(make_object("ns", "c"));
  EXPECT_EQ(log.wait_for(3), (std::vector<std::string>{"ADDED ns/a 101", "ADDED ns/b 102", "ADDED ns/c 103"}));
  const auto rvs = source->watch_resource_versions();
  ASSERT_GE(rvs.size(), 2u);
  EXPECT_EQ(rvs[1], "102") << "the second watch resumes where the first stopped";
  EXPECT_EQ(source->list_calls(), 1) << "a watch that ended normally needs no relist";
  EXPECT_EQ(settle(log).size(), 3u) << "nothing is delivered twice";
}

TEST(Informer, GoneRelistsAndDeliversTheDifferenceExactlyOnce) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "deleted"));
  source->upsert(make_object("ns", "modified"));
  source->upsert(make_object("ns", "unchanged"));
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_EQ(log.wait_for(3).size(), 3u);
  log.clear();

  // A gap: the informer sees none of these, then the history is compacted and the watch is told 410.
  source->hold_events(true);
  source->erase("ns", "deleted");
  source->upsert(make_object("ns", "modified", {{"replicas", 2}}));
  source->upsert(make_object("ns", "added"));
  source->compact();
  source->hold_events(false);
  source->send_gone_to_watches();

  ASSERT_GE(log.wait_for(3).size(), 3u);
  std::vector<std::string> sorted = settle(log);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"ADDED ns/added 106", "DELETED ns/deleted", "MODIFIED ns/modified 105"}));
  EXPECT_EQ(source->list_calls(), 2);
  EXPECT_EQ(informer.size(), 3u);
  EXPECT_EQ(informer.get("ns/modified")->at("spec").at("replicas"), 2);
  EXPECT_FALSE(informer.get("ns/deleted").has_value());

  // The watch after the relist continues from the list's version.
  source->upsert(make_object("ns", "later"));
  EXPECT_EQ(log.wait_for(4).back(), "ADDED ns/later 107");
  EXPECT_EQ(settle(log).size(), 4u);
}

TEST(Informer, GoneAtWatchStartRelists) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  source->fail_next_watches(1, 410);
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(eventually([&] { return source->list_calls() == 2 && source->watch_calls() >= 2; }));
  EXPECT_EQ(settle(log), (std::vector<std::string>{"ADDED ns/a 101"})) << "an unchanged relist delivers nothing";
}

TEST(Informer, DropsRepeatedEvents) {
  auto source = std::make_shared<FakeListWatcher>();
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  source->duplicate_events(true);
  source->upsert(make_object("ns", "a"));
  source->upsert(make_object("ns", "a", {{"x", 1}}));
  source->erase("ns", "a");
  EXPECT_EQ(log.wait_for(3), (std::vector<std::string>{"ADDED ns/a 101", "MODIFIED ns/a 102", "DELETED ns/a"}));
  EXPECT_EQ(settle(log).size(), 3u);
}

TEST(Informer, RetriesListAndWatchAfterTransportErrors) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  source->fail_next_lists(2);
  Informer informer(source, quick_options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  EXPECT_EQ(source->list_calls(), 3);
  ASSERT_TRUE(eventually([&] { return source->watch_calls() == 1; })) << "the first watch is open";

  source->fail_next_watches(2, 0);
  source->end_watches();
  ASSERT_TRUE(eventually([&] { return source->watch_calls() >= 4; }));
  source->upsert(make_object("ns", "b"));
  EXPECT_EQ(log.wait_for(2), (std::vector<std::string>{"ADDED ns/a 101", "ADDED ns/b 102"}));
  EXPECT_EQ(source->list_calls(), 3) << "a failed watch retries the watch, not the list";
  for (const std::string& rv : source->watch_resource_versions()) EXPECT_EQ(rv, "101");
}

TEST(Informer, ResyncReplaysTheCacheAsUpdates) {
  auto source = std::make_shared<FakeListWatcher>();
  source->upsert(make_object("ns", "a"));
  source->upsert(make_object("ns", "b"));
  InformerOptions options = quick_options();
  options.resync_period = milliseconds(100);
  Informer informer(source, options);
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  const auto events = log.wait_for(4);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[2], "RESYNC ns/a 101");
  EXPECT_EQ(events[3], "RESYNC ns/b 102");
  EXPECT_EQ(source->list_calls(), 1) << "resync replays the cache, it does not relist";
}

TEST(Informer, StopEndsAnOpenWatchPromptly) {
  auto source = std::make_shared<FakeListWatcher>();
  Informer informer(source, quick_options());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(5000)));
  ASSERT_TRUE(eventually([&] { return source->watch_calls() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  informer.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Informer, RejectsBadWatchTimeouts) {
  InformerOptions options = quick_options();
  options.min_watch_timeout_seconds = 20;
  options.max_watch_timeout_seconds = 10;
  EXPECT_THROW(Informer(std::make_shared<FakeListWatcher>(), options), std::invalid_argument);
}

TEST(Informer, WatchTimeoutIsDrawnFromTheConfiguredRange) {
  // Recorded through a wrapper: the fake stores only resource versions.
  struct RecordingSource : FakeListWatcher {
    std::mutex mu;
    std::vector<int> timeouts;
    std::string watch(const kube::WatchOptions& o, const std::function<bool(const kube::WatchEvent&)>& f,
                      const std::atomic<bool>* stop) override {
      {
        std::lock_guard<std::mutex> lock(mu);
        timeouts.push_back(o.timeout_seconds);
        EXPECT_TRUE(o.allow_bookmarks);
      }
      return FakeListWatcher::watch(o, f, stop);
    }
  };
  auto source = std::make_shared<RecordingSource>();
  Informer informer(source, quick_options());
  informer.start();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(eventually([&] { return source->watch_calls() >= i + 1; }));
    source->end_watches();
  }
  informer.stop();
  std::lock_guard<std::mutex> lock(source->mu);
  for (int t : source->timeouts) {
    EXPECT_GE(t, 5);
    EXPECT_LE(t, 10);
  }
}

}  // namespace
}  // namespace qsync::controller
