// File: tests/kube_api_server/local_kubelet.cpp
// Runs Pods as local processes (see local_kubelet.h): volumes as directories with their paths
// rewritten into the command and env, Service names resolved to the loopback, fork/exec with a
// process group per Pod so a kill reaches its children, waitpid polling for exit codes,
// status writes through the server, and graceful termination (the object removed through the
// server once the process has exited).
#include "tests/kube_api_server/local_kubelet.h"
#include "tests/kube_api_server/container_termination.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>

extern char** environ;

namespace qsync::kube_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string now_rfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string field_value(const json& pod, const std::string& path, const std::string& node_name) {
  if (path == "metadata.name") return pod["metadata"].value("name", "");
  if (path == "metadata.namespace") return pod["metadata"].value("namespace", "");
  if (path == "metadata.uid") return pod["metadata"].value("uid", "");
  if (path == "status.podIP" || path == "status.hostIP") return "127.0.0.1";
  if (path == "spec.nodeName") return node_name;
  return "";
}

json container_status(const std::string& name, const json& state, bool ready, int pid) {
  json s = {{"name", name}, {"ready", ready}, {"started", ready}, {"restartCount", 0},
            {"image", "local"}, {"imageID", ""}, {"state", state}};
  if (pid > 0) s["containerID"] = "local://" + std::to_string(pid);
  return s;
}

// The node a Pod runs on: spec.nodeName, else its required node affinity to a host name.
std::string bound_node(const json& spec) {
  std::string node = spec.value("nodeName", "");
  if (!node.empty()) return node;
  const json terms = spec.value(
      json::json_pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"),
      json::array());
  for (const json& term : terms) {
    for (const json& e : term.value("matchExpressions", json::array())) {
      const json values = e.value("values", json::array());
      if (e.value("key", "") == "kubernetes.io/hostname" && e.value("operator", "") == "In" && !values.empty())
        return values[0].get<std::string>();
    }
  }
  return "local";
}

// mountPath -> local directory, longest mountPath first.
using MountMap = std::vector<std::pair<std::string, std::string>>;

std::string rewrite_paths(const std::string& value, const MountMap& mounts) {
  for (const auto& [mount, local] : mounts) {
    for (size_t at = value.find(mount); at != std::string::npos; at = value.find(mount, at + 1)) {
      const size_t end = at + mount.size();
      const bool starts = at == 0 || value[at - 1] == '=';
      const bool ends = end == value.size() || value[end] == '/';
      if (starts && ends) return value.substr(0, at) + local + rewrite_paths(value.substr(end), mounts);
    }
  }
  return value;
}

// NAME.SVC.NS.svc[.cluster.local][:PORT] or SVC.NS.svc[...] -> 127.0.0.1[:PORT].
std::string resolve_cluster_dns(const std::string& value) {
  static const std::regex service_host(R"(^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?\.){2,3}svc(\.cluster\.local)?(:[0-9]+)?$)");
  if (!std::regex_match(value, service_host)) return value;
  const size_t colon = value.rfind(':');
  return colon == std::string::npos ? "127.0.0.1" : "127.0.0.1" + value.substr(colon);
}

std::string mapped_value(const std::string& value, const MountMap& mounts) {
  return resolve_cluster_dns(rewrite_paths(value, mounts));
}

void append_log(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << "local-kubelet: " << line << "\n";
}


}  // namespace

LocalKubelet::LocalKubelet(LocalKubeletOptions options, StatusWriter writer, ConfigMapReader config_maps,
                           PodRemover remover)
    : options_(std::move(options)), writer_(std::move(writer)), config_maps_(std::move(config_maps)),
      remover_(std::move(remover)) {
  if (options_.log_dir.empty())
    options_.log_dir = (fs::temp_directory_path() / ("qsync-kubelet-" + std::to_string(::getpid()))).string();
  if (options_.root_dir.empty()) options_.root_dir = options_.log_dir + "/volumes";
  fs::create_directories(options_.log_dir);
  fs::create_directories(options_.root_dir);
  worker_ = std::thread([this] { run(); });
}

LocalKubelet::~LocalKubelet() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

std::string LocalKubelet::log_path(const std::string& ns, const std::string& name) const {
  return options_.log_dir + "/" + ns + "_" + name + ".log";
}

std::string LocalKubelet::claim_dir(const std::string& ns, const std::string& claim) const {
  return options_.root_dir + "/claims/" + ns + "/" + claim;
}

std::string LocalKubelet::pod_dir(const std::string& uid) const { return options_.root_dir + "/pods/" + uid; }

std::vector<std::string> LocalKubelet::command_of(const json& pod) const {
  const json& spec = pod.value("spec", json::object());
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty()) return {};
  const json& c = spec["containers"][0];
  std::vector<std::string> argv;
  for (const auto& part : c.value("command", json::array())) argv.push_back(part.get<std::string>());
  for (const auto& part : c.value("args", json::array())) argv.push_back(part.get<std::string>());
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') return {};
  const std::string image_bin = "/usr/local/bin/";
  if (!options_.bin_dir.empty() && argv[0].rfind(image_bin, 0) == 0) {
    const std::string local = options_.bin_dir + "/" + argv[0].substr(image_bin.size());
    if (::access(local.c_str(), X_OK) == 0) argv[0] = local;
  }
  if (::access(argv[0].c_str(), X_OK) != 0) return {};
  return argv;
}

void LocalKubelet::pod_added(const json& pod) {
  std::lock_guard lock(mu_);
  if (!command_of(pod).empty()) live_.insert(pod["metadata"].value("uid", pod["metadata"].value("name", "")));
  queue_.push_back({WorkKind::added, pod});
  wake_.notify_all();
}

void LocalKubelet::pod_removed(const json& pod) {
  std::lock_guard lock(mu_);
  queue_.push_back({WorkKind::removed, pod});
  wake_.notify_all();
}

bool LocalKubelet::pod_terminating(const json& pod, long grace_seconds) {
  std::lock_guard lock(mu_);
  if (live_.count(pod["metadata"].value("uid", pod["metadata"].value("name", ""))) == 0) return false;
  queue_.push_back({WorkKind::terminating, pod, grace_seconds});
  wake_.notify_all();
  return true;
}

void LocalKubelet::forget(const std::string& uid) {
  std::lock_guard lock(mu_);
  live_.erase(uid);
}

void LocalKubelet::run() {
  for (;;) {
    std::deque<Work> work;
    {
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      work.swap(queue_);
    }
    for (const Work& w : work) {
      const std::string uid = w.pod["metadata"].value("uid", w.pod["metadata"].value("name", ""));
      if (w.kind == WorkKind::added) {
        if (processes_.count(uid) == 0 && waiting_.count(uid) == 0) waiting_[uid] = {w.pod, ""};
      } else if (w.kind == WorkKind::removed) {
        waiting_.erase(uid);
        stop_pod(w.pod);
      } else {
        waiting_.erase(uid);
        terminate_pod(w.pod, w.grace_seconds);
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      it = start_pod(it->second.pod, it->second.reason) ? waiting_.erase(it) : std::next(it);
    }
    reap();
  }
  for (auto& [uid, p] : processes_) {
    ::kill(-p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
  }
}

bool LocalKubelet::start_pod(const json& pod, std::string& waiting_reason) {
  const std::string ns = pod["metadata"].value("namespace", ""), name = pod["metadata"].value("name", "");
  const std::string uid = pod["metadata"].value("uid", name);
  std::vector<std::string> argv = command_of(pod);
  if (argv.empty()) {
    forget(uid);  // not ours (or its executable went away since it was added)
    return true;
  }
  const json& spec = pod["spec"];
  const json& c = spec["containers"][0];
  const std::string node = bound_node(spec);
  const std::string container = c.value("name", "main");
  const std::string log = log_path(ns, name);

  // Volumes: directories; ConfigMaps materialized (or the Pod waits for them).
  std::map<std::string, std::string> volume_dirs;
  for (const json& v : spec.value("volumes", json::array())) {
    const std::string vname = v.value("name", "");
    std::string dir = pod_dir(uid) + "/volumes/" + vname;
    if (v.contains("persistentVolumeClaim")) dir = claim_dir(ns, v["persistentVolumeClaim"].value("claimName", ""));
    fs::create_directories(dir);
    if (v.contains("configMap")) {
      const std::string cm_name = v["configMap"].value("name", "");
      const json cm = config_maps_(ns, cm_name);
      if (cm.is_null() && !v["configMap"].value("optional", false)) {
        const std::string reason = "configmap \"" + cm_name + "\" not found";
        if (waiting_reason != reason) {
          waiting_reason = reason;
          writer_(ns, name, uid, node,
                  {{"phase", "Pending"},
                   {"hostIP", "127.0.0.1"},
                   {"containerStatuses",
                    {container_status(container, {{"waiting", {{"reason", "ContainerCreating"}, {"message", reason}}}}, false, 0)}}});
        }
        return false;
      }
      const json data = cm.is_null() ? json::object() : cm.value("data", json::object());
      const json items = v["configMap"].value("items", json::array());
      if (items.empty()) {
        for (const auto& [key, value] : data.items()) std::ofstream(dir + "/" + key) << value.get<std::string>();
      } else {
        for (const json& item : items) {
          const std::string key = item.value("key", "");
          if (!data.contains(key)) continue;
          fs::path file = fs::path(dir) / item.value("path", key);
          fs::create_directories(file.parent_path());
          std::ofstream(file) << data[key].get<std::string>();
        }
      }
    }
    volume_dirs[vname] = dir;
  }
  MountMap mounts;
  for (const json& m : c.value("volumeMounts", json::array())) {
    auto dir = volume_dirs.find(m.value("name", ""));
    if (dir == volume_dirs.end()) continue;
    std::string local = dir->second;
    if (!m.value("subPath", "").empty()) {
      local += "/" + m.value("subPath", "");
      fs::create_directories(local);
    }
    std::string mount = m.value("mountPath", "");
    while (mount.size() > 1 && mount.back() == '/') mount.pop_back();
    if (!mount.empty()) mounts.emplace_back(mount, local);
  }
  // terminationMessagePath: a host file per container, mapped like a mount.
  const std::string message_path = c.value("terminationMessagePath", std::string("/dev/termination-log"));
  const std::string termination_log = pod_dir(uid) + "/containers/" + container + "/termination-log";
  fs::create_directories(fs::path(termination_log).parent_path());
  std::ofstream(termination_log, std::ios::trunc).close();
  if (!message_path.empty()) mounts.emplace_back(message_path, termination_log);
  std::sort(mounts.begin(), mounts.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (size_t i = 1; i < argv.size(); ++i) argv[i] = mapped_value(argv[i], mounts);

  // Ports another Pod here already declared: args naming them pick a free port instead.
  std::vector<int> ports;
  for (const json& p : c.value("ports", json::array())) ports.push_back(p.value("containerPort", 0));
  for (int port : ports) {
    bool taken = false;
    for (const auto& [other_uid, other] : processes_)
      taken = taken || std::count(other.ports.begin(), other.ports.end(), port) > 0;  // terminating ones too
    if (!taken) continue;
    for (size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] != std::to_string(port)) continue;
      argv[i] = "0";
      append_log(log, "containerPort " + std::to_string(port) + " is taken by another Pod on the shared loopback; arg " +
                          std::to_string(i) + " rewritten to 0 (a free port)");
    }
  }

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& var : c.value("env", json::array())) {
    std::string value = mapped_value(var.value("value", ""), mounts);
    if (var.contains("valueFrom") && var["valueFrom"].contains("fieldRef")) {
      value = field_value(pod, var["valueFrom"]["fieldRef"].value("fieldPath", ""), node);
    }
    env[var.value("name", "")] = value;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv_ptrs, env_ptrs;
  for (auto& a : argv) argv_ptrs.push_back(a.data());
  argv_ptrs.push_back(nullptr);
  for (auto& e : env_strings) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);
  const std::string workdir = mapped_value(c.value("workingDir", ""), mounts);
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::error_code log_size_error;
  const std::uintmax_t log_offset = fs::file_size(log, log_size_error);

  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    if (!workdir.empty() && ::chdir(workdir.c_str()) != 0) ::_exit(126);
    ::execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  const std::string started = now_rfc3339();
  if (pid < 0) {
    forget(uid);
    writer_(ns, name, uid, node,
            {{"phase", "Failed"}, {"reason", "StartError"}, {"message", "fork failed"}, {"hostIP", "127.0.0.1"}});
    return true;
  }
  ::setpgid(pid, pid);
  Process p;
  p.pid = pid;
  p.ns = ns;
  p.name = name;
  p.uid = uid;
  p.container = container;
  p.started_at = started;
  p.ports = ports;
  p.log = log;
  p.log_offset = log_size_error ? 0 : log_offset;
  p.termination_log = termination_log;
  p.fallback_to_logs = c.value("terminationMessagePolicy", "") == "FallbackToLogsOnError";
  p.grace_seconds = spec.value("terminationGracePeriodSeconds", 30L);
  processes_[p.uid] = p;
  writer_(ns, name, uid, node,
          {{"phase", "Running"},
           {"podIP", "127.0.0.1"},
           {"podIPs", {{{"ip", "127.0.0.1"}}}},
           {"hostIP", "127.0.0.1"},
           {"startTime", started},
           {"conditions", {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", started}}}},
           {"containerStatuses", {container_status(container, {{"running", {{"startedAt", started}}}}, true, pid)}}});
  return true;
}

void LocalKubelet::stop_pod(const json& pod) {
  const std::string uid = pod["metadata"].value("uid", pod["metadata"].value("name", ""));
  if (processes_.count(uid) == 0) forget(uid);  // removed before it started
  auto it = processes_.find(uid);
  if (it == processes_.end()) {
    std::error_code ignored;
    fs::remove_all(pod_dir(uid), ignored);  // its emptyDirs and ConfigMap copies go with it
    return;
  }
  if (it->second.terminating) return;
  it->second.terminating = true;
  it->second.kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(it->second.grace_seconds);
  ::kill(-it->second.pid, SIGTERM);
}

void LocalKubelet::terminate_pod(const json& pod, long grace_seconds) {
  const std::string uid = pod["metadata"].value("uid", pod["metadata"].value("name", ""));
  auto it = processes_.find(uid);
  if (it == processes_.end()) {  // exited already, or never started: nothing to wait for
    forget(uid);
    std::error_code ignored;
    fs::remove_all(pod_dir(uid), ignored);
    remover_(pod["metadata"].value("namespace", ""), pod["metadata"].value("name", ""), uid);
    return;
  }
  Process& p = it->second;
  p.remove_on_exit = true;
  const auto kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(std::max(0L, grace_seconds));
  if (p.terminating) {
    p.kill_at = std::min(p.kill_at, kill_at);  // a second DELETE may shorten the grace period
    return;
  }
  p.terminating = true;
  p.kill_at = kill_at;
  ::kill(-p.pid, SIGTERM);
}

void LocalKubelet::reap() {
  for (auto it = processes_.begin(); it != processes_.end();) {
    Process& p = it->second;
    int wstatus = 0;
    pid_t done = ::waitpid(p.pid, &wstatus, WNOHANG);
    if (done == 0) {
      if (p.terminating && std::chrono::steady_clock::now() >= p.kill_at) ::kill(-p.pid, SIGKILL);
      ++it;
      continue;
    }
    forget(p.uid);
    std::string message = termination_message_file(p.termination_log);
    const bool failed = !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0;
    if (message.empty() && failed && p.fallback_to_logs) message = log_tail(p.log, p.log_offset);
    // A Pod removed outright has no object to write to; a gracefully deleted one gets its final
    // status (as a node's kubelet writes it before the object goes), then is removed.
    if (!p.terminating || p.remove_on_exit) {
      const std::string finished = now_rfc3339();
      const json terminated = terminated_state(p.started_at, p.pid, wstatus, message, finished);
      const int code = terminated["exitCode"].get<int>();
      writer_(p.ns, p.name, p.uid, "",
              {{"phase", code == 0 ? "Succeeded" : "Failed"},
               {"podIP", "127.0.0.1"},
               {"podIPs", {{{"ip", "127.0.0.1"}}}},
               {"hostIP", "127.0.0.1"},
               {"startTime", p.started_at},
               {"conditions", {{{"type", "Ready"}, {"status", "False"}, {"lastTransitionTime", finished}}}},
               {"containerStatuses", {container_status(p.container, {{"terminated", terminated}}, false, p.pid)}}});
    }
    if (p.terminating) {
      std::error_code ignored;
      fs::remove_all(pod_dir(p.uid), ignored);
      if (p.remove_on_exit) remover_(p.ns, p.name, p.uid);
    }
    it = processes_.erase(it);
  }
}

}  // namespace qsync::kube_test
