// File: tests/kube_api_server/local_kubelet.h
// The test API server's "local kubelet": it runs a Pod whose first container's command starts
// with an absolute path to an executable as a local process, emulating what a node does as far
// as one machine without containers can:
//   - Binary mapping: with a bin dir (--kubelet-bin-dir DIR), an executable /usr/local/bin/NAME
//     runs DIR/NAME when that file exists (the image's binaries are the build's).
//   - Node binding: spec.nodeName, else the first value of a requiredDuringScheduling node
//     affinity term on kubernetes.io/hostname (operator In), else "local". The Pod "runs on" that
//     node; nothing checks the Node object exists (the scheduler's job, not the kubelet's).
//   - Volumes: each Pod gets ROOT/pods/UID/volumes/NAME. A configMap volume is materialized
//     there at Pod start (one file per key of `data`, or of `items`); the Pod waits in Pending
//     (ContainerCreating) while its ConfigMap is missing, unless the volume is optional. An
//     emptyDir is an empty directory that lives as long as the Pod (removed when the Pod is
//     deleted and its process is gone). A persistentVolumeClaim is ROOT/claims/NS/CLAIM, shared
//     by every Pod naming the claim and kept across Pods (as a ReadWriteMany claim would be), so
//     checkpoints survive whole-job restarts. A process cannot see a real mount namespace here,
//     so container paths are rewritten instead: in the command, args, env values and workingDir,
//     a volumeMount's mountPath (longest first) at the start of a value or after '=' and followed
//     by '/' or the end is replaced by the volume's local directory (subPath honoured).
//   - Termination messages: the first container's terminationMessagePath (default
//     /dev/termination-log, as the API server defaults it) is a host file
//     ROOT/pods/UID/containers/NAME/termination-log, empty at start, mapped into the command, args,
//     env and workingDir like a mountPath. At exit its first 4096 bytes become
//     state.terminated.message; with terminationMessagePolicy FallbackToLogsOnError, a failed exit
//     and an empty file, the message is the tail of what this process wrote to its log (the last
//     80 lines, at most 2048 bytes), as Kubernetes does.
//   - Cluster DNS: every Pod shares the host's loopback, so an env value or arg that is a
//     Service host name (NAME.SVC.NS.svc, SVC.NS.svc, optionally .cluster.local, optionally
//     with :PORT) becomes 127.0.0.1 (with the port kept).
//   - Ports: one loopback means two Pods cannot listen on one port. When a Pod declares a
//     containerPort that a Pod still running here declared first, every arg that is exactly that
//     number becomes "0" (the usual "pick a free port"), and the Pod's log says so. Env values
//     are left alone (a rendezvous port in MASTER_PORT names the peer, not the Pod itself).
//   - Environment: the container's env (values, and fieldRefs to metadata.name,
//     metadata.namespace, metadata.uid, status.podIP, status.hostIP, spec.nodeName) on top of
//     the server's own environment; stdout and stderr to LOG_DIR/NAMESPACE_NAME.log, appended
//     across Pods of one name (so a restarted job's log keeps both attempts).
//   - Status: Pending -> Running (podIP 127.0.0.1, startTime, Ready True, containerStatuses
//     running) -> Succeeded or Failed from the exit code (terminated: exitCode, reason Completed
//     or Error, signal; Ready False). Writes carry the Pod's uid and are dropped when the Pod of
//     that name is a newer one.
//   - Graceful deletion (pod_terminating, as a node's kubelet does it): the server has set the
//     Pod's deletionTimestamp and keeps the object (Terminating; a create of the same name is
//     409 AlreadyExists); the kubelet SIGTERMs the process group, SIGKILLs it when the grace
//     period the server chose (DeleteOptions.gracePeriodSeconds, else
//     spec.terminationGracePeriodSeconds, default 30) ends, and once the process has exited (at
//     once when it had already exited or never started) writes the terminated status (exit code,
//     termination message) and then calls the PodRemover, which removes the object. A Pod it does not run gets false: the server removes it at once.
//   - Immediate removal (pod_removed: the object is already gone, e.g. gracePeriodSeconds=0 or a
//     Pod it does not run): SIGTERM to the process group, SIGKILL after
//     spec.terminationGracePeriodSeconds (default 30).
// Pods with other commands are left as they are. One worker thread does everything;
// pod_added/pod_removed/pod_terminating only queue (the server calls them holding its lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

struct LocalKubeletOptions {
  std::string log_dir;   // "": a temp directory
  std::string bin_dir;   // "": /usr/local/bin/NAME runs as itself
  std::string root_dir;  // Pod and claim directories; "": LOG_DIR/volumes
};

class LocalKubelet {
 public:
  // Writes a Pod's status (and spec.nodeName when the Pod has none) if the Pod named ns/name
  // still has uid `uid`. Called from the worker thread without any kubelet lock held.
  using StatusWriter = std::function<void(const std::string& ns, const std::string& name, const std::string& uid,
                                          const std::string& node_name, const nlohmann::json& status)>;
  // Reads a ConfigMap from the store (null when absent). Called from the worker thread.
  using ConfigMapReader = std::function<nlohmann::json(const std::string& ns, const std::string& name)>;
  // Removes a terminating Pod's object once its process has exited, if the Pod named ns/name
  // still has uid `uid`. Called from the worker thread without any kubelet lock held.
  using PodRemover = std::function<void(const std::string& ns, const std::string& name, const std::string& uid)>;

  LocalKubelet(LocalKubeletOptions options, StatusWriter writer, ConfigMapReader config_maps, PodRemover remover);
  ~LocalKubelet();  // SIGKILLs every process still running and joins the worker
  LocalKubelet(const LocalKubelet&) = delete;
  LocalKubelet& operator=(const LocalKubelet&) = delete;

  void pod_added(const nlohmann::json& pod);
  void pod_removed(const nlohmann::json& pod);
  // Graceful deletion: true when this kubelet runs the Pod (its process is running or about to
  // start); it then stops the process within `grace_seconds` and calls the PodRemover. False
  // when it does not run the Pod (not ours, or its process already exited and was reported).
  bool pod_terminating(const nlohmann::json& pod, long grace_seconds);

  const std::string& log_dir() const { return options_.log_dir; }
  const std::string& root_dir() const { return options_.root_dir; }
  std::string log_path(const std::string& ns, const std::string& name) const;
  // Where a persistentVolumeClaim's files live.
  std::string claim_dir(const std::string& ns, const std::string& claim) const;

 private:
  struct Process {
    int pid = -1;
    std::string ns, name, uid, container, started_at;
    std::vector<int> ports;  // containerPorts it declared
    std::string log;               // its log file, and where this process's output starts in it
    std::uintmax_t log_offset = 0;
    std::string termination_log;   // host file behind terminationMessagePath
    bool fallback_to_logs = false;  // terminationMessagePolicy FallbackToLogsOnError
    long grace_seconds = 30;
    bool terminating = false;
    bool remove_on_exit = false;  // graceful deletion: the PodRemover removes the object at exit
    std::chrono::steady_clock::time_point kill_at;
  };
  enum class WorkKind { added, removed, terminating };
  struct Work {
    WorkKind kind = WorkKind::added;
    nlohmann::json pod;
    long grace_seconds = 30;  // terminating only
  };
  struct Waiting {
    nlohmann::json pod;
    std::string reason;  // the last one written, so it is written once
  };

  void run();
  // The first container's command and args with the bin dir mapping; empty when it does not
  // start with an absolute path to an executable (a Pod this kubelet leaves alone).
  std::vector<std::string> command_of(const nlohmann::json& pod) const;
  // True when the Pod started (or is not ours to run); false while it waits for a volume.
  bool start_pod(const nlohmann::json& pod, std::string& waiting_reason);
  void stop_pod(const nlohmann::json& pod);
  void terminate_pod(const nlohmann::json& pod, long grace_seconds);
  void reap();
  void forget(const std::string& uid);  // the Pod no longer has a process to wait for
  std::string pod_dir(const std::string& uid) const;

  LocalKubeletOptions options_;
  StatusWriter writer_;
  ConfigMapReader config_maps_;
  PodRemover remover_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::set<std::string> live_;  // uids of Pods it runs whose process has not exited yet; under mu_
  std::map<std::string, Process> processes_;  // by pod uid; worker thread only
  std::map<std::string, Waiting> waiting_;    // by pod uid: Pods whose volumes are not ready
  std::thread worker_;
};

}  // namespace qsync::kube_test
