// File: tests/e2e/inference_load.h
// The inference side of the borrowing end-to-end test, as threads of the test process:
//   InferenceLoad     sends GET /infer at a settable rate (requests/s) to the replicas of a
//                     Deployment of qsync-test-inference-server, round-robin over the addresses
//                     their port files in a directory name; it also keeps a Prometheus file-SD
//                     file listing those addresses, so Prometheus scrapes exactly the live replicas.
//   ReplicaMonitor    polls a Deployment through the API (GET, no kubectl) every 200 ms and keeps
//                     the lowest readyReplicas seen once armed, and when spec.replicas rose and
//                     readyReplicas caught up (scale-outs, for the test's own reclaim timings).
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::test {

class InferenceLoad {
 public:
  // port_dir: where the replicas write NAME.port; sd_file: the file-SD JSON to keep current.
  InferenceLoad(std::string port_dir, std::string sd_file);
  ~InferenceLoad();  // stops the threads
  void set_rate(double requests_per_second) { rate_ = requests_per_second; }
  int64_t served() const { return served_; }
  int64_t failed() const { return failed_; }
  std::vector<std::string> replicas();  // "127.0.0.1:PORT" of each port file now

 private:
  void send_loop();
  void discover_loop();

  std::string port_dir_, sd_file_;
  std::atomic<double> rate_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> served_{0}, failed_{0};
  std::mutex mu_;
  std::vector<std::string> targets_;
  std::thread sender_, discoverer_;
};

struct ScaleOut {
  double at = 0;       // when spec.replicas rose (seconds since the epoch)
  double ready = 0;    // when readyReplicas reached it (0: not yet)
  int64_t replicas = 0;
};

class ReplicaMonitor {
 public:
  ReplicaMonitor(int api_port, std::string deployment_path);
  ~ReplicaMonitor();
  void arm() { armed_ = true; }  // from now on, the lowest readyReplicas counts
  int64_t lowest_ready() const { return lowest_; }
  std::vector<ScaleOut> scale_outs();
  nlohmann::json last();  // the Deployment as last seen

 private:
  void loop();
  int api_port_;
  std::string path_;
  std::atomic<bool> stop_{false}, armed_{false};
  std::atomic<int64_t> lowest_{1 << 30};
  std::mutex mu_;
  std::vector<ScaleOut> scale_outs_;
  nlohmann::json last_;
  std::thread thread_;
};

}  // namespace qsync::test
