// File: bench/operator_bench_fixtures.cpp
// The objects, memory readings and child processes of qsync-bench-operator.
#include "bench/operator_bench_fixtures.h"

#include <malloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace qsync::operator_bench {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double proc_status_mib(const std::string& field, const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) / 1024.0;  // kB
  }
  throw std::runtime_error("/proc/" + pid + "/status has no " + field + " (is /proc mounted?)");
}

double live_rss_mib() {
  malloc_trim(0);
  return proc_status_mib("VmRSS");
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string numbered(const char* prefix, int i) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%05d", i);
  return std::string(prefix) + digits;
}

std::unique_ptr<kube::KubeClient> make_client(const std::string& url, double qps, int burst) {
  kube::KubeConfig config;
  config.server = url;
  config.namespace_ = "default";
  config.source = "qsync-bench-operator";
  kube::ClientOptions options;
  options.qps = qps;
  options.burst = burst;
  return std::make_unique<kube::KubeClient>(config, options);
}

json pod_object(int i) {
  const std::string rank = std::to_string(i % 64), job = "job-" + std::to_string(i / 64);
  json env = json::array();
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"QSYNC_RANK", rank}, {"QSYNC_WORLD_SIZE", "64"}, {"QSYNC_MASTER_ADDR", job + "-master." + kPodNamespace},
           {"QSYNC_MASTER_PORT", "29500"}, {"QSYNC_PLAN", "/etc/qsync/plan.json"}, {"NCCL_DEBUG", "WARN"}}) {
    env.push_back({{"name", k}, {"value", v}});
  }
  const json resources = {{"cpu", "8"}, {"memory", "32Gi"}, {"nvidia.com/gpu", "1"}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", numbered("trainer-", i)},
            {"namespace", kPodNamespace},
            {"labels", {{"app.kubernetes.io/name", "qsync-worker"}, {"qsync.io/job", job}, {"qsync.io/rank", rank},
                        {"qsync.io/pool", i % 2 ? "a100" : "t4"}, {"bench-seq", "0"}}},
            {"annotations", {{"qsync.io/plan-hash", "sha256:9f2c4e1d0b7a6c5e3f8d2a1b4c6e8f0a"}}}}},
          {"spec",
           {{"nodeName", "node-" + std::to_string(i % 100)},
            {"restartPolicy", "Never"},
            {"containers",
             {{{"name", "worker"},
               {"image", "registry.example.com/qsync/worker:0.6.0"},
               {"command", {"/opt/qsync/bin/qsync-worker"}},
               {"args", {"--rank", rank, "--world-size", "64", "--plan", "/etc/qsync/plan.json"}},
               {"env", env},
               {"resources", {{"requests", resources}, {"limits", resources}}},
               {"ports", {{{"name", "rendezvous"}, {"containerPort", 29500}, {"protocol", "TCP"}}}}}}}}},
          {"status",
           {{"phase", "Running"},
            {"hostIP", "10.0.0." + std::to_string(i % 100)},
            {"podIP", "10.244." + std::to_string(i / 250) + "." + std::to_string(i % 250)},
            {"startTime", "2026-03-01T12:00:00Z"},
            {"conditions", {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-03-01T12:00:05Z"}}}},
            {"containerStatuses",
             {{{"name", "worker"},
               {"ready", true},
               {"restartCount", 0},
               {"image", "registry.example.com/qsync/worker:0.6.0"},
               {"containerID", "containerd://" + std::string(64, char('a' + i % 6))},
               {"state", {{"running", {{"startedAt", "2026-03-01T12:00:04Z"}}}}}}}}}}};
}

json config_map_object(int i) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", numbered("settings-", i)}, {"namespace", kConfigMapNamespace}}},
          {"data", {{"index", std::to_string(i)}}}};
}

void create_namespace(kube::KubeClient& client, const std::string& name) {
  try {
    client.create(kube::namespaces_type(), "", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
  } catch (const kube::KubeError& e) {
    if (e.code() != 409) throw;
  }
}

void create_objects(kube::KubeClient& client, const kube::ResourceType& type, const std::string& ns, int count,
                    json (*make)(int), int threads) {
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  std::exception_ptr failure;
  std::mutex failure_mu;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      try {
        for (int i = next++; i < count; i = next++) client.create(type, ns, make(i));
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mu);
        if (!failure) failure = std::current_exception();
        next = count;
      }
    });
  }
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe() failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = posix_spawn(&pid_, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    pid_ = -1;
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  out_ = fdopen(fds[0], "r");
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  if (out_) std::fclose(out_);
}

std::string ChildProcess::read_line() {
  std::string line;
  for (int c = std::fgetc(out_); c != EOF && c != '\n'; c = std::fgetc(out_)) line.push_back(char(c));
  return line;
}

int ChildProcess::wait() {
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe (is /proc mounted?)");
  return std::string(buf, size_t(n));
}

}  // namespace qsync::operator_bench
