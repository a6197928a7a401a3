// File: tests/operator/controller/informer_server_test.cpp
// The informer over the real client against the Kubernetes API test server: a paged list, then
// a watch; dropped connections and closed watches while objects are written lose and repeat no
// event; a 410 after a gap relists and delivers the difference exactly once.
#include "operator/controller/informer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "tests/operator/api_server_fixture.h"
#include "tests/operator/controller/quick_informer_options.h"
#include "tests/operator/controller/recorded_events.h"
#include "tests/operator/numbered.h"
#include "tests/operator/wait_until.h"

namespace qsync::controller {
namespace {

using operator_test::numbered;
using std::chrono::milliseconds;

bool eventually(const std::function<bool()>& p) { return operator_test::wait_until(p, milliseconds(10000)); }

// Handler calls as "ADDED name rv" / "MODIFIED name rv" / "DELETED name".
class EventLog : public controller_test::RecordedEvents {
 public:
  EventHandler handler() {
    EventHandler h;
    h.on_add = [this](const json& o) { push("ADDED " + name_of(o) + " " + resource_version_of(o)); };
    h.on_update = [this](const json&, const json& o) { push("MODIFIED " + name_of(o) + " " + resource_version_of(o)); };
    h.on_delete = [this](const json& o) { push("DELETED " + name_of(o)); };
    return h;
  }

 private:
  static std::string name_of(const json& o) { return o["metadata"].value("name", ""); }
};

kube::ClientOptions unlimited_rate() {
  kube::ClientOptions options;
  options.qps = 0;  // unlimited: the test paces itself
  return options;
}

class InformerServerTest : public operator_test::ApiServerTest {
 protected:
  InformerServerTest() : ApiServerTest({}, unlimited_rate()) {}

  InformerOptions options(int64_t page_size = 500) {
    InformerOptions o = controller_test::quick_informer_options("configmaps");
    o.page_size = page_size;
    o.initial_backoff = milliseconds(20);
    o.max_backoff = milliseconds(100);
    return o;
  }

  std::shared_ptr<ListWatcher> source() {
    return std::make_shared<KubeListWatcher>(*client_, kube::config_maps_type(), "default");
  }

  // Writes through the server directly (no socket), so dropping connections cannot fail them.
  json put(const std::string& name, int value) {
    return server_.put_object({{"apiVersion", "v1"},
                               {"kind", "ConfigMap"},
                               {"metadata", {{"name", name}, {"namespace", "default"}}},
                               {"data", {{"value", std::to_string(value)}}}});
  }
  void remove(const std::string& name) {
    const auto answer = server_.call("DELETE", "/api/v1/namespaces/default/configmaps/" + name);
    ASSERT_EQ(answer.status / 100, 2) << answer.body;
  }
  bool caught_up(const Informer& informer) {
    return informer.last_resource_version() == server_.current_resource_version();
  }
};

TEST_F(InformerServerTest, ListsInPagesThenWatches) {
  for (int i = 0; i < 7; ++i) put(numbered("cm-", i), i);
  Informer informer(source(), options(3));
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(10000))) << server_.recent_requests_text();
  EXPECT_EQ(informer.size(), 7u);
  EXPECT_EQ(log.all().size(), 7u);
  const std::string requests = server_.recent_requests_text();
  EXPECT_NE(requests.find("continue="), std::string::npos) << "the list was not paged:\n" << requests;

  const json changed = put("cm-1", 100);
  remove("cm-2");
  const json added = put("cm-new", 1);
  ASSERT_TRUE(eventually([&] { return caught_up(informer) && log.all().size() == 10; })) << server_.recent_requests_text();
  const auto events = log.all();
  EXPECT_EQ(events[7], "MODIFIED cm-1 " + resource_version_of(changed));
  EXPECT_EQ(events[8], "DELETED cm-2");
  EXPECT_EQ(events[9], "ADDED cm-new " + resource_version_of(added));
  EXPECT_EQ(informer.get("default/cm-1")->at("data").at("value"), "100");
  EXPECT_FALSE(informer.get("default/cm-2").has_value());
}

TEST_F(InformerServerTest, DroppedConnectionsAndClosedWatchesLoseAndRepeatNothing) {
  Informer informer(source(), options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(10000)));

  std::vector<std::string> expected;
  std::atomic<bool> writing{true};
  std::thread disrupter([&] {
    for (int i = 0; writing; ++i) {
      std::this_thread::sleep_for(milliseconds(30));
      if (i % 2 == 0) {
        server_.drop_connections();
      } else {
        server_.close_watches();
      }
    }
  });
  std::set<std::string> live;
  for (int i = 0; i < 120; ++i) {
    const std::string name = numbered("cm-", i % 9);
    if (live.count(name) && i % 4 == 3) {
      remove(name);
      live.erase(name);
      expected.push_back("DELETED " + name);
    } else {
      const json written = put(name, i);
      expected.push_back((live.count(name) ? "MODIFIED " : "ADDED ") + name + " " + resource_version_of(written));
      live.insert(name);
    }
    std::this_thread::sleep_for(milliseconds(3));
  }
  writing = false;
  disrupter.join();
  ASSERT_TRUE(eventually([&] { return caught_up(informer) && log.all().size() >= expected.size(); }))
      << "informer at " << informer.last_resource_version() << ", server at " << server_.current_resource_version();
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(log.all(), expected);
  EXPECT_EQ(informer.size(), live.size());
  EXPECT_EQ(informer.lists(), 1) << "the history held every event: no relist was needed";
  EXPECT_GT(informer.watches(), 2) << "the disruptions did not end any watch";
}

TEST_F(InformerServerTest, GoneAfterAGapRelistsAndDeliversTheDifferenceOnce) {
  put("deleted", 1);
  put("modified", 1);
  put("unchanged", 1);
  Informer informer(source(), options());
  EventLog log;
  informer.add_handler(log.handler());
  informer.start();
  ASSERT_TRUE(informer.wait_for_sync(milliseconds(10000)));
  ASSERT_TRUE(eventually([&] { return informer.watches() >= 1; }));
  log.clear();

  // The informer cannot watch during the gap; then the history it would resume from is gone.
  kube_test::FaultRule outage;
  outage.verb = "watch";
  outage.code = 500;
  outage.remaining = 1000000;
  server_.fail_next(outage);
  server_.close_watches();
  const int watches_before = informer.watches();
  ASSERT_TRUE(eventually([&] { return informer.watches() >= watches_before + 2; }));
  remove("deleted");
  const json modified = put("modified", 2);
  const json added = put("added", 1);
  server_.compact_history();
  server_.clear_faults();

  ASSERT_TRUE(eventually([&] { return informer.lists() == 2 && caught_up(informer); })) << server_.recent_requests_text();
  std::this_thread::sleep_for(milliseconds(100));
  std::vector<std::string> events = log.all();
  std::sort(events.begin(), events.end());
  EXPECT_EQ(events, (std::vector<std::string>{"ADDED added " + resource_version_of(added), "DELETED deleted",
                                              "MODIFIED modified " + resource_version_of(modified)}));
  EXPECT_EQ(informer.size(), 3u);

  const json later = put("later", 1);
  ASSERT_TRUE(eventually([&] { return log.all().size() == 4; }));
  EXPECT_EQ(log.all().back(), "ADDED later " + resource_version_of(later));
}

}  // namespace
}  // namespace qsync::controller
