// File: bench/operator_bench_fixtures.h
// What qsync-bench-operator's measurements run on: realistic Pod and ConfigMap objects created
// through a KubeClient, the process's resident memory from /proc, and child processes (the API
// test server binary, the bench itself in its informer-only mode) whose stdout is read.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kube/kube_client.h"

namespace qsync::operator_bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline constexpr const char* kPodNamespace = "bench-pods";
inline constexpr const char* kConfigMapNamespace = "bench-configmaps";

double seconds_since(Clock::time_point start);

// A field of /proc/PID/status in MiB ("VmRSS", "VmHWM"); pid "self" for this process.
double proc_status_mib(const std::string& field, const std::string& pid = "self");
// VmRSS after malloc_trim(0) has handed freed heap pages back: the live share, without the pages
// glibc keeps after transient peaks (parsed list pages, the in-process server's copies).
double live_rss_mib();
std::string load_average();  // "/proc/loadavg"'s first three fields

// "trainer-00042".
std::string numbered(const char* prefix, int i);
// A client of the server at `url` (plain HTTP); qps 0: unlimited.
std::unique_ptr<kube::KubeClient> make_client(const std::string& url, double qps, int burst);

// Pod `i` of a training job in kPodNamespace, about 1.5 KB of JSON: labels, an annotation, one
// container with command, env, resources and ports, and a Running status.
json pod_object(int i);
// ConfigMap `i` in kConfigMapNamespace.
json config_map_object(int i);
void create_namespace(kube::KubeClient& client, const std::string& name);  // an existing one is fine
// Creates objects make(0) .. make(count - 1) from `threads` threads; rethrows the first failure.
void create_objects(kube::KubeClient& client, const kube::ResourceType& type, const std::string& ns, int count,
                    json (*make)(int), int threads = 4);

// A child process whose stdout is read through a pipe; sent SIGTERM and reaped when destroyed.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);  // argv[0]: the executable's path
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  std::string read_line();  // "" at end of output
  int wait();               // the exit code (-1: killed by a signal)

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

std::string self_path();  // this executable, from /proc/self/exe

}  // namespace qsync::operator_bench
