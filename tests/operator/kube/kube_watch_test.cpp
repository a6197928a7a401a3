// File: tests/operator/kube/kube_watch_test.cpp
// KubeClient::watch against a scripted server streaming chunked JSON lines: events arrive one
// by one (the server sends the next only after the client has seen the previous), bookmarks
// move the returned resourceVersion, a 410 answer and an ERROR event with a 410 Status throw
// KubeError 410, `stop` ends a silent watch promptly and closes the connection, and on_event
// returning false ends it too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "operator/kube/kube_client.h"
#include "operator/kube/kube_http.h"
#include "tests/operator/kube/scripted_api_server.h"

namespace qsync::kube {
namespace {

using kube_test_support::json_answer;
using kube_test_support::ScriptedApiServer;
using Clock = std::chrono::steady_clock;

ClientOptions unlimited_options() {
  ClientOptions options;
  options.qps = 0;
  return options;
}

std::string event_line(const std::string& type, const std::string& name, const std::string& version) {
  json object = {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"name", name}, {"resourceVersion", version}}}};
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

// Counts events the client has handled; the server's stream waits on it.
class Progress {
 public:
  void advance() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
    }
    cv_.notify_all();
  }
  bool wait_for_count(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return count_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

TEST(KubeWatchTest, EventsArriveOneByOneAndBookmarksMoveTheVersion) {
  Progress progress;
  ScriptedApiServer api([&](const http::HttpRequest&) {
    http::HandlerResult result;
    result.response.headers["Content-Type"] = "application/json";
    result.stream = [&](http::ResponseStream& stream) {
      stream.write(event_line("ADDED", "a", "11"));
      if (!progress.wait_for_count(1)) return;  // the client saw "a" before "b" was even sent
      stream.write(event_line("MODIFIED", "a", "12"));
      if (!progress.wait_for_count(2)) return;
      // Two events in one chunk, one split across chunks.
      std::string two = event_line("ADDED", "b", "13") + event_line("DELETED", "a", "14");
      stream.write(two);
      std::string bookmark = json{{"type", "BOOKMARK"},
                                  {"object", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", "20"}}}}}}
                                 .dump() +
                             "\n";
      stream.write(bookmark.substr(0, 10));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      stream.write(bookmark.substr(10));
    };
    return result;
  });
  KubeClient client(api.config("tok"), unlimited_options());
  WatchOptions options;
  options.resource_version = "10";
  options.timeout_seconds = 30;
  options.label_selector = "app in (x,y)";
  std::vector<std::pair<std::string, std::string>> events;
  std::string last = client.watch(pods_type(), "default", options, [&](const WatchEvent& event) {
    events.emplace_back(event.type, event.object["metadata"].value("resourceVersion", ""));
    progress.advance();
    return true;
  });
  std::vector<std::pair<std::string, std::string>> expected = {
      {"ADDED", "11"}, {"MODIFIED", "12"}, {"ADDED", "13"}, {"DELETED", "14"}, {"BOOKMARK", "20"}};
  EXPECT_EQ(events, expected);
  EXPECT_EQ(last, "20");

  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].path, "/api/v1/namespaces/default/pods");
  EXPECT_EQ(seen[0].param("watch"), "1");
  EXPECT_EQ(seen[0].param("resourceVersion"), "10");
  EXPECT_EQ(seen[0].param("allowWatchBookmarks"), "true");
  EXPECT_EQ(seen[0].param("timeoutSeconds"), "30");
  EXPECT_EQ(seen[0].param("labelSelector"), "app in (x,y)");
  EXPECT_EQ(seen[0].header("authorization"), "Bearer tok");
}

TEST(KubeWatchTest, AnEmptyStreamReturnsTheStartingVersion) {
  ScriptedApiServer api([](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [](http::ResponseStream&) {};  // the server's timeout: no events
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  WatchOptions options;
  options.resource_version = "77";
  options.allow_bookmarks = false;
  EXPECT_EQ(client.watch(leases_type(), "", options, [](const WatchEvent&) { return true; }), "77");
  auto seen = api.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/apis/coordination.k8s.io/v1/leases");
  EXPECT_EQ(seen[0].param("allowWatchBookmarks"), "");
}

TEST(KubeWatchTest, GoneAnswerThrows410) {
  ScriptedApiServer api([](const http::HttpRequest&) {
    return json_answer(410, kube_status_json(410, "Expired", "too old resource version: 1 (500)"));
  });
  std::vector<std::pair<std::string, int>> observed;
  ClientOptions options = unlimited_options();
  options.observer = [&](const std::string& verb, int code, double) { observed.emplace_back(verb, code); };
  KubeClient client(api.config(), options);
  WatchOptions watch_options;
  watch_options.resource_version = "1";
  try {
    client.watch(pods_type(), "default", watch_options, [](const WatchEvent&) { return true; });
    FAIL() << "expected 410";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.code(), 410);
    EXPECT_TRUE(is_gone(e));
    EXPECT_EQ(e.reason(), "Expired");
    EXPECT_EQ(e.verb(), "watch");
  }
  ASSERT_EQ(observed.size(), 1u);
  EXPECT_EQ(observed[0], std::make_pair(std::string("watch"), 410));
}

TEST(KubeWatchTest, ErrorEventWithGoneStatusThrows410AfterEarlierEvents) {
  ScriptedApiServer api([](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [](http::ResponseStream& stream) {
      stream.write(event_line("ADDED", "a", "5"));
      stream.write(json{{"type", "ERROR"}, {"object", kube_status_json(410, "Expired", "too old resource version")}}.dump() +
                   "\n");
      stream.write(event_line("ADDED", "never", "6"));
    };
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  std::vector<std::string> names;
  try {
    client.watch(pods_type(), "default", {}, [&](const WatchEvent& event) {
      names.push_back(event.object["metadata"]["name"]);
      return true;
    });
    FAIL() << "expected 410";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.code(), 410);
    EXPECT_TRUE(is_gone(e));
    EXPECT_EQ(e.api_message(), "too old resource version");
  }
  EXPECT_EQ(names, std::vector<std::string>{"a"});
}

TEST(KubeWatchTest, StopEndsASilentWatchPromptlyAndClosesTheConnection) {
  std::atomic<bool> client_left{false};
  ScriptedApiServer api([&](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [&](http::ResponseStream& stream) {
      stream.write(event_line("ADDED", "a", "3"));
      auto deadline = Clock::now() + std::chrono::seconds(20);
      while (Clock::now() < deadline) {
        if (stream.client_gone()) {
          client_left = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    };
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  std::atomic<bool> stop{false};
  std::atomic<int> events{0};
  std::jthread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  auto start = Clock::now();
  std::string last = client.watch(pods_type(), "default", {}, [&](const WatchEvent&) {
    ++events;
    return true;
  }, &stop);
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stopper.join();
  EXPECT_EQ(events.load(), 1);
  EXPECT_EQ(last, "3");
  EXPECT_LT(elapsed, 2.3);  // stop at 0.3 s, seen within ~0.1 s
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!client_left && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(client_left.load()) << "the server never saw the watch connection close";
}

TEST(KubeWatchTest, StopWhileWaitingForHeadersReturns) {
  std::atomic<bool> release{false};
  ScriptedApiServer api([&](const http::HttpRequest&) {
    // Slow to answer at all: holds the headers until the test ends (or 10 s).
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!release && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return json_answer(200, json::object());
  });
  KubeClient client(api.config(), unlimited_options());
  std::atomic<bool> stop{false};
  std::jthread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  auto start = Clock::now();
  client.watch(pods_type(), "default", {}, [](const WatchEvent&) { return true; }, &stop);
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stopper.join();
  release = true;
  EXPECT_LT(elapsed, 2.0);
}

TEST(KubeWatchTest, HandlerReturningFalseEndsTheWatch) {
  ScriptedApiServer api([](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [](http::ResponseStream& stream) {
      for (int i = 1; i <= 1000 && stream.write(event_line("ADDED", std::string("p").append(std::to_string(i)), std::to_string(i))); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    };
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  int seen = 0;
  std::string last = client.watch(pods_type(), "default", {}, [&](const WatchEvent&) { return ++seen < 3; });
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(last, "3");
}

TEST(KubeWatchTest, ConnectionCutMidStreamIsATransportError) {
  Progress progress;
  ScriptedApiServer api([&](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [&](http::ResponseStream& stream) {
      stream.write(event_line("ADDED", "a", "8"));
      auto deadline = Clock::now() + std::chrono::seconds(10);
      while (!stream.client_gone() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  std::jthread cutter([&] {
    if (progress.wait_for_count(1)) api.server().drop_connections();
  });
  std::vector<std::string> versions;
  try {
    client.watch(pods_type(), "default", {}, [&](const WatchEvent& event) {
      versions.push_back(event.object["metadata"]["resourceVersion"]);
      progress.advance();
      return true;
    });
    FAIL() << "expected a transport error";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_transport(e)) << e.what();
  }
  EXPECT_EQ(versions, std::vector<std::string>{"8"});
}

TEST(KubeWatchTest, MalformedEventIsATransportError) {
  ScriptedApiServer api([](const http::HttpRequest&) {
    http::HandlerResult result;
    result.stream = [](http::ResponseStream& stream) { stream.write("this is not json\n"); };
    return result;
  });
  KubeClient client(api.config(), unlimited_options());
  try {
    client.watch(pods_type(), "default", {}, [](const WatchEvent&) { return true; });
    FAIL() << "expected an error";
  } catch (const KubeError& e) {
    EXPECT_TRUE(is_transport(e));
    EXPECT_NE(std::string(e.what()).find("malformed watch event"), std::string::npos);
  }
}

// Found by tests/fuzz (kube_watch_event): an ERROR event whose code is not an integer (or whose
// object is not a Status) escaped as nlohmann's type_error; it is the API's generic 500 error.
TEST(KubeWatchTest, ErrorEventWithAnOddCodeIsA500) {
  KubeConfig config;
  config.server = "http://127.0.0.1:1";
  for (const std::string& line : {std::string(R"({"type":"ERROR","object":{"kind":"Status","code":"410"}})"),
                                  std::string(R"({"type":"ERROR","object":7})")}) {
    SCOPED_TRACE(line);
    try {
      (void)watch_event_from_line(line, config, "/api/v1/pods");
      ADD_FAILURE() << "an ERROR event was accepted";
    } catch (const KubeError& e) {
      EXPECT_EQ(e.code(), 500) << e.what();
    }
  }
  EXPECT_FALSE(watch_event_from_line("  \r", config, "/api/v1/pods").has_value());
}

}  // namespace
}  // namespace qsync::kube
