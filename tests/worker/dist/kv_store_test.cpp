// File: tests/worker/dist/kv_store_test.cpp
// The rendezvous key-value store on 127.0.0.1: set/get/wait/add across clients on several threads,
// blocking gets, timeouts that name the keys, stop() answering pending waits, port-in-use and
// unreachable-server errors, immediate reuse of the port after a stop, values across the
// server's read chunks, and peers that claim more than they send.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <thread>

#include "tests/worker/dist/dist_test_support.h"
#include "worker/dist/kv_protocol.h"
#include "worker/dist/kv_store.h"

namespace qsync {
namespace {

using std::chrono::milliseconds;
using test::Stopwatch;

constexpr milliseconds kTimeout{5000};

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

KeyValueClient client_of(const KeyValueServer& server, const std::string& who = "rank 1 of 2") {
  return KeyValueClient("127.0.0.1", server.port(), kTimeout, who);
}

TEST(KeyValueStore, SetThenGetFromAnotherClient) {
  KeyValueServer server("127.0.0.1", 0);
  KeyValueClient a("127.0.0.1", server.port(), kTimeout, "rank 0 of 2");
  KeyValueClient b("127.0.0.1", server.port(), kTimeout, "rank 1 of 2");
  const std::vector<char> binary = {'x', '\0', '\x7f', '\xff', 'y'};
  a.set("key", binary);
  EXPECT_EQ(b.get("key"), binary);
  a.set("empty", {});
  EXPECT_TRUE(b.get("empty").empty());
  b.set("key", bytes("overwritten"));
  EXPECT_EQ(a.get("key"), bytes("overwritten"));
  EXPECT_TRUE(a.check("key"));
  EXPECT_FALSE(a.check("absent"));
  EXPECT_EQ(server.connection_count(), 2);
}

TEST(KeyValueStore, GetBlocksUntilAnotherClientSets) {
  KeyValueServer server("127.0.0.1", 0);
  std::vector<char> got;
  double waited = 0;
  std::thread reader([&] {
    KeyValueClient c("127.0.0.1", server.port(), kTimeout, "reader");
    Stopwatch clock;
    got = c.get("late");
    waited = clock.seconds();
  });
  std::this_thread::sleep_for(milliseconds(150));
  KeyValueClient writer("127.0.0.1", server.port(), kTimeout, "writer");
  writer.set("late", bytes("here"));
  reader.join();
  EXPECT_EQ(got, bytes("here"));
  EXPECT_GE(waited, 0.1);
  EXPECT_LT(waited, 2.0);
}

TEST(KeyValueStore, WaitForKeysSetByManyThreads) {
  KeyValueServer server("127.0.0.1", 0);
  constexpr int kThreads = 8;
  std::vector<std::string> keys;
  for (int i = 0; i < kThreads; ++i) keys.push_back("worker/" + std::to_string(i));
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    KeyValueClient c("127.0.0.1", server.port(), kTimeout, "waiter");
    c.wait(keys);
    waited = true;
  });
  std::vector<std::thread> setters;
  for (int i = 0; i < kThreads; ++i) {
    setters.emplace_back([&, i] {
      KeyValueClient c("127.0.0.1", server.port(), kTimeout, "setter " + std::to_string(i));
      std::this_thread::sleep_for(milliseconds(10 * (kThreads - i)));
      c.set(keys[i], bytes(std::to_string(i)));
    });
  }
  for (std::thread& t : setters) t.join();
  waiter.join();
  EXPECT_TRUE(waited);
  KeyValueClient c = client_of(server);
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(c.get(keys[i]), bytes(std::to_string(i)));
}

TEST(KeyValueStore, AddIsAtomicAcrossClients) {
  KeyValueServer server("127.0.0.1", 0);
  constexpr int kThreads = 4, kAdds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      KeyValueClient c("127.0.0.1", server.port(), kTimeout, "adder");
      for (int i = 0; i < kAdds; ++i) c.add("counter", 1);
    });
  }
  for (std::thread& t : threads) t.join();
  KeyValueClient c = client_of(server);
  EXPECT_EQ(c.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(c.get("counter"), bytes(std::to_string(kThreads * kAdds)));
  EXPECT_EQ(c.add("counter", -kThreads * kAdds - 5), -5);
  c.set("text", bytes("not a number"));
  try {
    c.add("text", 1);
    FAIL() << "add on a non-counter must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'text' holds a value that is not a counter"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(c.add("fresh", 3), 3);  // the connection still works after the refusal
  // Found with tests/fuzz (kv_store): a counter past int64 was signed overflow on the server.
  EXPECT_EQ(c.add("big", std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
  try {
    c.add("big", 1);
    ADD_FAILURE() << "an overflowing add() was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'big' would leave the 64-bit range"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.add("big", 0), std::numeric_limits<int64_t>::max()) << "the refused add changed the counter";
  EXPECT_EQ(c.add("big", std::numeric_limits<int64_t>::min()), -1);
}

TEST(KeyValueStore, GetTimeoutNamesTheKey) {
  KeyValueServer server("127.0.0.1", 0);
  KeyValueClient c = client_of(server, "rank 3 of 4");
  Stopwatch clock;
  try {
    c.get("rendezvous/never", milliseconds(200));
    FAIL() << "get of a key nobody sets must time out";
  } catch (const StoreWaitError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("timed out after 200 ms waiting for key 'rendezvous/never'"),
              std::string::npos) << message;
    EXPECT_NE(message.find("rank 3 of 4"), std::string::npos) << message;
    EXPECT_EQ(e.missing(), std::vector<std::string>{"rendezvous/never"});
    EXPECT_FALSE(e.server_stopped());
  }
  EXPECT_GE(clock.seconds(), 0.19);
  EXPECT_LT(clock.seconds(), 2.0);
  c.set("after", bytes("ok"));  // the connection is still in step
  EXPECT_EQ(c.get("after"), bytes("ok"));
}

TEST(KeyValueStore, WaitTimeoutListsOnlyTheMissingKeys) {
  KeyValueServer server("127.0.0.1", 0);
  KeyValueClient c = client_of(server);
  c.set("a", bytes("1"));
  try {
    c.wait({"a", "b", "c"}, milliseconds(100));
    FAIL() << "wait must time out";
  } catch (const StoreWaitError& e) {
    EXPECT_EQ(e.missing(), (std::vector<std::string>{"b", "c"}));
    const std::string message = e.what();
    EXPECT_NE(message.find("keys 'b', 'c'"), std::string::npos) << message;
    EXPECT_EQ(message.find("'a'"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(c.wait({"a"}, milliseconds(0)));
}

TEST(KeyValueStore, StopAnswersPendingWaitsAtOnce) {
  auto server = std::make_unique<KeyValueServer>("127.0.0.1", 0);
  std::string error;
  bool stopped = false;
  double waited = 0;
  std::thread waiter([&] {
    KeyValueClient c("127.0.0.1", server->port(), milliseconds(20000), "rank 1 of 2");
    Stopwatch clock;
    try {
      c.get("never");
    } catch (const StoreWaitError& e) {
      error = e.what();
      stopped = e.server_stopped();
    }
    waited = clock.seconds();
  });
  while (server->connection_count() < 1) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(100));
  server->stop();
  waiter.join();
  EXPECT_TRUE(stopped) << error;
  EXPECT_NE(error.find("stopped while rank 1 of 2 waited for key 'never'"), std::string::npos)
      << error;
  EXPECT_LT(waited, 3.0);
}

TEST(KeyValueStore, LostServerIsReported) {
  auto server = std::make_unique<KeyValueServer>("127.0.0.1", 0);
  KeyValueClient c = client_of(*server, "rank 2 of 3");
  server.reset();
  try {
    c.set("k", bytes("v"));
    c.set("k", bytes("v"));  // the first write may still land in the socket buffer
    FAIL() << "a store whose server stopped must fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("lost the connection to the rendezvous master"),
              std::string::npos) << e.what();
  }
}

TEST(KeyValueStore, PortInUseIsRefused) {
  test::PortHolder plain;  // a listener without SO_REUSEADDR
  const std::string expected = "port " + std::to_string(plain.port()) +
                               " on 127.0.0.1 is in use: pick another MASTER_PORT";
  try {
    KeyValueServer server("127.0.0.1", plain.port());
    FAIL() << "binding a port with a listener must fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  // A second store on a port our own store (SO_REUSEADDR set) listens on is refused too.
  KeyValueServer first("127.0.0.1", 0);
  try {
    KeyValueServer second("127.0.0.1", first.port());
    FAIL() << "two stores on one port must fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("port " + std::to_string(first.port()) +
                                         " on 127.0.0.1 is in use"),
              std::string::npos) << e.what();
  }
}

TEST(KeyValueStore, PortIsReusableRightAfterStop) {
  int port = 0;
  {
    KeyValueServer server("127.0.0.1", 0);
    port = server.port();
    KeyValueClient c = client_of(server);
    c.set("k", bytes("v"));
    server.stop();  // the server closes first: its side of the connection enters TIME_WAIT
  }
  KeyValueServer again("127.0.0.1", port);
  KeyValueClient c = client_of(again);
  EXPECT_FALSE(c.check("k"));
}

TEST(KeyValueStore, UnreachableServerTimesOutWithTheFix) {
  const int port = test::free_port();
  Stopwatch clock;
  try {
    KeyValueClient c("127.0.0.1", port, milliseconds(300), "rank 1 of 4");
    FAIL() << "connecting to a port nobody listens on must fail";
  } catch (const std::runtime_error& e) {
    const std::string expected = "could not reach the rendezvous master 127.0.0.1:" +
                                 std::to_string(port) +
                                 " within 300 ms (rank 1 of 4): check MASTER_ADDR/MASTER_PORT "
                                 "and that rank 0 is running";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  EXPECT_GE(clock.seconds(), 0.29);
  EXPECT_LT(clock.seconds(), 2.0);
}

TEST(KeyValueStore, ClientRetriesUntilTheServerStarts) {
  const int port = test::free_port();
  std::unique_ptr<KeyValueServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    server = std::make_unique<KeyValueServer>("127.0.0.1", port);
  });
  KeyValueClient c("127.0.0.1", port, kTimeout, "rank 1 of 2");
  starter.join();
  c.set("k", bytes("v"));
  EXPECT_EQ(c.get("k"), bytes("v"));
}

TEST(KeyValueStore, ForeignServiceIsNotMistakenForTheStore) {
  test::PortHolder foreign;
  std::thread service([&] {
    const int fd = ::accept(foreign.fd(), nullptr, nullptr);
    const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(fd, reply, sizeof reply - 1, MSG_NOSIGNAL);
    ::close(fd);
  });
  try {
    KeyValueClient c("127.0.0.1", foreign.port(), kTimeout, "rank 1 of 2");
    FAIL() << "a service that is not the store must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer as a QSync rendezvous store"),
              std::string::npos) << e.what();
  }
  service.join();
}

TEST(KeyValueStore, OversizedKeyIsRefusedBeforeSending) {
  KeyValueServer server("127.0.0.1", 0);
  KeyValueClient c = client_of(server);
  EXPECT_THROW(c.set(std::string(70000, 'k'), bytes("v")), std::invalid_argument);
  c.set("k", bytes("v"));  // the connection is untouched
  EXPECT_EQ(c.get("k"), bytes("v"));
}

TEST(KeyValueStore, ValueAcrossReadChunksRoundTrips) {
  KeyValueServer server("127.0.0.1", 0);
  KeyValueClient a = client_of(server), b = client_of(server);
  std::vector<char> value((3u << 20) + 5);  // three of the server's 1 MiB chunks and a tail
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>((i * 131) ^ (i >> 12));
  a.set("large", value);
  EXPECT_EQ(b.get("large"), value);
}

// Peak resident memory of this process, in MiB.
double peak_rss_mib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

TEST(KeyValueStore, ClaimedLengthCostsOnlyWhatArrives) {
  // Four peers each claim a 256 MiB value, send 10 bytes of it and close. Allocating the claim up
  // front made the server zero 1 GiB; growing with what arrives costs a few MiB.
  KeyValueServer server("127.0.0.1", 0);
  const double before = peak_rss_mib();
  for (int peer = 0; peer < 4; ++peer) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    kv::Writer request;
    request.u8(kv::kSet).str("claimed").u32(kv::kMaxValueBytes);
    for (int i = 0; i < 10; ++i) request.u8('v');
    ASSERT_EQ(kv::send_all(fd, kv::kMagic, sizeof kv::kMagic), kv::IoResult::kOk);
    ASSERT_EQ(kv::send_all(fd, request.data().data(), request.data().size()), kv::IoResult::kOk);
    ::shutdown(fd, SHUT_WR);
    char magic[sizeof kv::kMagic];
    EXPECT_EQ(kv::recv_all(fd, magic, sizeof magic, std::nullopt), kv::IoResult::kOk);
    EXPECT_EQ(kv::recv_all(fd, magic, 1, std::nullopt), kv::IoResult::kClosed)
        << "the server answered a value that never arrived";
    ::close(fd);
  }
  ASSERT_TRUE(server.wait_for_connections_at_most(0, kTimeout));
  EXPECT_LT(peak_rss_mib() - before, 128.0);
  KeyValueClient c = client_of(server);
  EXPECT_FALSE(c.check("claimed")) << "a value cut short was stored";
}

TEST(KeyValueStore, FormatDuration) {
  EXPECT_EQ(format_duration(milliseconds(60000)), "60 s");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1.5 s");
  EXPECT_EQ(format_duration(milliseconds(300)), "300 ms");
}

}  // namespace
}  // namespace qsync
