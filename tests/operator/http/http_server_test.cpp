// File: tests/operator/http/http_server_test.cpp
// Unit tests of qsync::http::HttpServer over real loopback sockets: keep-alive, chunked request
// bodies, streamed chunked responses, detection of a client that went away, drop_connections()
// and the URL coding helpers. The client side is raw sockets so every byte on the wire is seen.
#include "operator/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace qsync::http {
namespace {

using namespace std::chrono_literals;

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect failed");
  }
  ~RawClient() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& data) { ASSERT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), (ssize_t)data.size()); }
  // Reads until `needle` appears in what was received (or EOF / 10 s); returns everything read.
  std::string read_until(const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (buffer_.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      if (!read_some()) break;
    }
    return buffer_;
  }
  // True once the server closed the connection (read returns 0 or an error) within 10 s.
  bool wait_closed() {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!read_some()) return eof_;
    }
    return false;
  }
  std::string& buffer() { return buffer_; }

 private:
  bool read_some() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) return true;
    char chunk[4096];
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool eof_ = false;
  std::string buffer_;
};

HandlerResult echo(const HttpRequest& req) {
  HandlerResult r;
  r.response.headers["Content-Type"] = "text/plain";
  r.response.body = req.method + " " + req.path + " q=" + req.param("q") + " body=" + req.body;
  return r;
}

TEST(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  HttpServer server("127.0.0.1", 0, echo);
  RawClient c(server.port());
  c.send("GET /a%20b?q=x%2By+z HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string first = c.read_until("body=");
  EXPECT_NE(first.find("HTTP/1.1 200 OK"), std::string::npos);
  EXPECT_NE(first.find("GET /a b q=x+y z body="), std::string::npos) << first;
  c.buffer().clear();
  c.send("POST /second HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  std::string second = c.read_until("hello");
  EXPECT_NE(second.find("POST /second q= body=hello"), std::string::npos) << second;
}

TEST(HttpServerTest, ConnectionCloseIsHonoured) {
  HttpServer server("127.0.0.1", 0, echo);
  RawClient c(server.port());
  c.send("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(c.wait_closed());
  EXPECT_NE(c.buffer().find("Connection: close"), std::string::npos) << c.buffer();
}

TEST(HttpServerTest, ChunkedRequestBodyIsReassembled) {
  HttpServer server("127.0.0.1", 0, echo);
  RawClient c(server.port());
  c.send("PUT /obj HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n");
  std::string out = c.read_until("world");
  EXPECT_NE(out.find("body=hello, world"), std::string::npos) << out;
  EXPECT_NE(out.find("Content-Length: "), std::string::npos);
}

TEST(HttpServerTest, StreamedResponseIsChunkedAndTerminated) {
  HttpServer server("127.0.0.1", 0, [](const HttpRequest&) {
    HandlerResult r;
    r.response.headers["Content-Type"] = "application/json";
    r.stream = [](ResponseStream& s) {
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.write("{\"n\":" + std::to_string(i) + "}\n"));
    };
    return r;
  });
  RawClient c(server.port());
  c.send("GET /watch HTTP/1.1\r\n\r\n");
  std::string out = c.read_until("0\r\n\r\n");
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos) << out;
  EXPECT_NE(out.find("8\r\n{\"n\":0}\n\r\n8\r\n{\"n\":1}\n\r\n8\r\n{\"n\":2}\n\r\n0\r\n\r\n"), std::string::npos) << out;
  // The connection stays usable after the stream ends.
  c.buffer().clear();
  c.send("GET /again HTTP/1.1\r\n\r\n");
  EXPECT_NE(c.read_until("0\r\n\r\n").find("{\"n\":2}"), std::string::npos);
}

struct StreamProbe {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, saw_gone = false, write_failed = false;
};

HandlerResult endless_stream(StreamProbe& probe) {
  HandlerResult r;
  r.stream = [&probe](ResponseStream& s) {
    {
      std::lock_guard lock(probe.mu);
      probe.started = true;
    }
    probe.cv.notify_all();
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (s.client_gone()) {
        std::lock_guard lock(probe.mu);
        probe.saw_gone = true;
        break;
      }
      if (!s.write("tick\n")) {
        std::lock_guard lock(probe.mu);
        probe.write_failed = true;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    probe.cv.notify_all();
  };
  return r;
}

TEST(HttpServerTest, StreamNoticesClientGone) {
  StreamProbe probe;
  HttpServer server("127.0.0.1", 0, [&](const HttpRequest&) { return endless_stream(probe); });
  {
    RawClient c(server.port());
    c.send("GET /watch HTTP/1.1\r\n\r\n");
    c.read_until("tick");
  }  // the client closes its socket
  std::unique_lock lock(probe.mu);
  ASSERT_TRUE(probe.cv.wait_for(lock, 10s, [&] { return probe.saw_gone || probe.write_failed; }));
}

TEST(HttpServerTest, DropConnectionsEndsOpenStreams) {
  StreamProbe probe;
  HttpServer server("127.0.0.1", 0, [&](const HttpRequest&) { return endless_stream(probe); });
  RawClient c(server.port());
  c.send("GET /watch HTTP/1.1\r\n\r\n");
  c.read_until("tick");
  server.drop_connections();
  EXPECT_TRUE(c.wait_closed());
  std::unique_lock lock(probe.mu);
  ASSERT_TRUE(probe.cv.wait_for(lock, 10s, [&] { return probe.saw_gone || probe.write_failed; }));
  lock.unlock();
  // The server still accepts new connections.
  StreamProbe unused;
  (void)unused;
  RawClient again(server.port());
  again.send("GET /watch HTTP/1.1\r\n\r\n");
  EXPECT_NE(again.read_until("tick").find("tick"), std::string::npos);
}

TEST(HttpServerTest, StopEndsStreamsAndJoins) {
  StreamProbe probe;
  auto server = std::make_unique<HttpServer>("127.0.0.1", 0, [&](const HttpRequest&) { return endless_stream(probe); });
  RawClient c(server->port());
  c.send("GET /watch HTTP/1.1\r\n\r\n");
  c.read_until("tick");
  auto start = std::chrono::steady_clock::now();
  server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, HandlerExceptionBecomes500) {
  HttpServer server("127.0.0.1", 0, [](const HttpRequest&) -> HandlerResult { throw std::runtime_error("boom"); });
  RawClient c(server.port());
  c.send("GET / HTTP/1.1\r\n\r\n");
  std::string out = c.read_until("boom");
  EXPECT_NE(out.find("HTTP/1.1 500"), std::string::npos) << out;
}

TEST(HttpServerTest, BindingAUsedPortThrowsNamingTheAddress) {
  HttpServer first("127.0.0.1", 0, echo);
  try {
    HttpServer second("127.0.0.1", first.port(), echo);
    FAIL() << "binding a used port should throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << e.what();
  }
  EXPECT_EQ(first.url(), "http://127.0.0.1:" + std::to_string(first.port()));
}

TEST(UrlCodingTest, DecodeAndEncode) {
  EXPECT_EQ(url_decode("a%2Fb%20c+d", false), "a/b c+d");
  EXPECT_EQ(url_decode("a%2Fb%20c+d", true), "a/b c d");
  EXPECT_EQ(url_decode("bad%zz%4", false), "bad%zz%4");
  EXPECT_EQ(url_encode("app=web,tier in (a b)"), "app%3Dweb%2Ctier%20in%20%28a%20b%29");
  EXPECT_EQ(url_decode(url_encode("x/y?z=1&w"), false), "x/y?z=1&w");
}

}  // namespace
}  // namespace qsync::http
