// File: tests/e2e/inference_load.cpp
// The load generator, file-based discovery and the Deployment monitor of the borrowing
// end-to-end test (see inference_load.h).
#include "tests/e2e/inference_load.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "tests/support/http_client.h"

namespace qsync::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

InferenceLoad::InferenceLoad(std::string port_dir, std::string sd_file)
    : port_dir_(std::move(port_dir)), sd_file_(std::move(sd_file)) {
  std::ofstream(sd_file_) << "[]\n";
  sender_ = std::thread([this] { send_loop(); });
  discoverer_ = std::thread([this] { discover_loop(); });
}

InferenceLoad::~InferenceLoad() {
  stop_ = true;
  sender_.join();
  discoverer_.join();
}

std::vector<std::string> InferenceLoad::replicas() {
  std::lock_guard<std::mutex> lock(mu_);
  return targets_;
}

void InferenceLoad::discover_loop() {
  while (!stop_) {
    std::vector<std::string> found;
    std::error_code ec;
    if (fs::is_directory(port_dir_, ec))
      for (const fs::directory_entry& e : fs::directory_iterator(port_dir_, ec)) {
        if (e.path().extension() != ".port") continue;
        std::string address;
        std::ifstream(e.path()) >> address;
        if (!address.empty()) found.push_back(address);
      }
    std::sort(found.begin(), found.end());
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      changed = found != targets_;
      targets_ = found;
    }
    if (changed) {
      const std::string partial = sd_file_ + ".tmp";
      std::ofstream(partial) << nlohmann::json::array({{{"targets", found}, {"labels", {{"app", "chat"}}}}}).dump() << "\n";
      fs::rename(partial, sd_file_, ec);  // Prometheus re-reads the file when it changes
    }
    std::this_thread::sleep_for(300ms);
  }
}

void InferenceLoad::send_loop() {
  size_t next = 0;
  double due = now_seconds();
  while (!stop_) {
    const double rate = rate_;
    if (rate <= 0) {
      std::this_thread::sleep_for(100ms);
      due = now_seconds();
      continue;
    }
    const std::vector<std::string> targets = replicas();
    if (!targets.empty()) {
      const std::string& t = targets[next++ % targets.size()];
      const size_t colon = t.rfind(':');
      try {
        const HttpResponse r = http_get(t.substr(0, colon), std::stoi(t.substr(colon + 1)), "/infer", 2s);
        (r.status == 200 ? served_ : failed_)++;
      } catch (const std::exception&) {
        ++failed_;  // a replica going away between discovery and the request
      }
    }
    due += 1.0 / rate;
    const double wait = due - now_seconds();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    if (wait < -2) due = now_seconds();  // fell behind (a slow replica): do not burst to catch up
  }
}

ReplicaMonitor::ReplicaMonitor(int api_port, std::string deployment_path) : api_port_(api_port), path_(std::move(deployment_path)) {
  thread_ = std::thread([this] { loop(); });
}

ReplicaMonitor::~ReplicaMonitor() {
  stop_ = true;
  thread_.join();
}

std::vector<ScaleOut> ReplicaMonitor::scale_outs() {
  std::lock_guard<std::mutex> lock(mu_);
  return scale_outs_;
}

nlohmann::json ReplicaMonitor::last() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void ReplicaMonitor::loop() {
  int64_t replicas = -1;
  while (!stop_) {
    try {
      const HttpResponse r = http_get("127.0.0.1", api_port_, path_, 2s);
      const nlohmann::json d = nlohmann::json::parse(r.body, nullptr, false);
      if (r.status == 200 && d.is_object()) {
        const int64_t want = d.value(nlohmann::json::json_pointer("/spec/replicas"), int64_t(1));
        const int64_t ready = d.value(nlohmann::json::json_pointer("/status/readyReplicas"), int64_t(0));
        std::lock_guard<std::mutex> lock(mu_);
        last_ = d;
        if (armed_ && ready < lowest_) lowest_ = ready;
        if (replicas >= 0 && want > replicas) scale_outs_.push_back({now_seconds(), 0, want});
        for (ScaleOut& s : scale_outs_)
          if (s.ready == 0 && ready >= s.replicas) s.ready = now_seconds();
        replicas = want;
      }
    } catch (const std::exception&) {
      // the server is busy: look again
    }
    std::this_thread::sleep_for(200ms);
  }
}

}  // namespace qsync::test
