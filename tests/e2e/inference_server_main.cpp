// File: tests/e2e/inference_server_main.cpp
// qsync-test-inference-server: the stand-in for an inference replica in the borrowing
// end-to-end test. It answers GET /infer after --service-ms milliseconds (the "model"), counts
// the requests it served as the Prometheus counter qsync_test_inference_requests_total (GET
// /metrics, text format), and writes where it listens ("127.0.0.1:PORT") to DIR/$POD_NAME.port
// once it is listening (atomically; removed again at exit), so the test's load generator and
// Prometheus (file-based discovery) find the replicas of a Deployment. Stops on SIGTERM/SIGINT.
//   qsync-test-inference-server [--port 0] [--port-dir DIR] [--service-ms 5]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "operator/http/http_server.h"

namespace {

int run(int argc, char** argv) {
  int port = 0, service_ms = 5;
  std::string port_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--port") {
      port = std::stoi(value());
    } else if (a == "--port-dir") {
      port_dir = value();
    } else if (a == "--service-ms") {
      service_ms = std::stoi(value());
    } else {
      throw std::invalid_argument("unknown argument " + a + " (usage: [--port P] [--port-dir DIR] [--service-ms MS])");
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // the server's threads inherit it; sigwait below

  std::atomic<int64_t> served{0}, in_flight{0};
  qsync::http::HttpServer server("127.0.0.1", port, [&](const qsync::http::HttpRequest& req) {
    qsync::http::HandlerResult r;
    if (req.path == "/metrics") {
      r.response.headers["Content-Type"] = "text/plain; version=0.0.4";
      r.response.body =
          "# HELP qsync_test_inference_requests_total Inference requests served.\n"
          "# TYPE qsync_test_inference_requests_total counter\n"
          "qsync_test_inference_requests_total " + std::to_string(served.load()) + "\n"
          "# HELP qsync_test_inference_in_flight Requests being served.\n"
          "# TYPE qsync_test_inference_in_flight gauge\n"
          "qsync_test_inference_in_flight " + std::to_string(in_flight.load()) + "\n";
    } else if (req.path == "/infer") {
      ++in_flight;
      std::this_thread::sleep_for(std::chrono::milliseconds(service_ms));
      --in_flight;
      ++served;
      r.response.body = "ok\n";
    } else {
      r.response.status = 404;
      r.response.body = "not found: GET /infer or /metrics\n";
    }
    return r;
  });
  std::string port_file;
  if (!port_dir.empty()) {
    const char* pod = std::getenv("POD_NAME");
    port_file = port_dir + "/" + (pod != nullptr && *pod ? pod : "replica-" + std::to_string(::getpid())) + ".port";
    std::filesystem::create_directories(port_dir);
    const std::string partial = port_file + ".tmp";
    std::ofstream(partial) << "127.0.0.1:" << server.port() << "\n";
    std::filesystem::rename(partial, port_file);
  }
  std::cerr << "qsync-test-inference-server: serving on " << server.url() << std::endl;
  int sig = 0;
  sigwait(&stop, &sig);
  if (!port_file.empty()) std::filesystem::remove(port_file);
  server.stop();
  std::cerr << "qsync-test-inference-server: stopped after " << served.load() << " requests" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "qsync-test-inference-server: " << e.what() << std::endl;
    return 2;
  }
}
