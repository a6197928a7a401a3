// File: bench/operator_bench_phases.cpp
// The measurements of qsync-bench-operator: informer scale, event latency, reconcile throughput.
#include "bench/operator_bench_phases.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/operator_bench_fixtures.h"
#include "operator/controller/controller.h"
#include "operator/controller/list_watcher.h"
#include "operator/controller/work_queue.h"

namespace qsync::operator_bench {
namespace {

controller::InformerOptions informer_options(const std::string& name, int64_t page_size) {
  controller::InformerOptions o;
  o.name = name;
  o.resync_period = std::chrono::milliseconds(0);
  o.page_size = page_size;
  return o;
}

std::unique_ptr<controller::Informer> pods_informer(kube::KubeClient& client, int64_t page_size) {
  return std::make_unique<controller::Informer>(
      std::make_shared<controller::KubeListWatcher>(client, kube::pods_type(), kPodNamespace),
      informer_options("pods", page_size));
}

// Fails loudly instead of reporting a figure for an informer that never synced.
void require_sync(const controller::Informer& informer, size_t expected, std::chrono::seconds timeout) {
  if (!informer.wait_for_sync(timeout) || informer.size() != expected) {
    throw std::runtime_error("informer " + informer.name() + " did not sync " + std::to_string(expected) +
                             " objects within " + std::to_string(timeout.count()) + " s (it holds " +
                             std::to_string(informer.size()) + ")");
  }
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, size_t(p * double(sorted.size() - 1) + 0.5))];
}

}  // namespace

InProcessInformer informer_scale_in_process(kube::KubeClient& client, int pods, int64_t page_size) {
  const double rss_empty = proc_status_mib("VmRSS");
  create_namespace(client, kPodNamespace);
  const auto create_start = Clock::now();
  create_objects(client, kube::pods_type(), kPodNamespace, pods, pod_object);
  const double create_seconds = seconds_since(create_start);
  const double rss_created = proc_status_mib("VmRSS"), rss_created_trimmed = live_rss_mib();

  InProcessInformer out{nlohmann::json::object(), pods_informer(client, page_size)};
  const auto start = Clock::now();
  out.informer->start();
  require_sync(*out.informer, size_t(pods), std::chrono::seconds(300));
  const double sync_seconds = seconds_since(start);
  const double rss_synced = proc_status_mib("VmRSS"), rss_synced_trimmed = live_rss_mib();
  out.figures = {{"pods", pods},
                 {"pod_json_bytes", pod_object(0).dump().size()},
                 {"create_seconds", create_seconds},
                 {"sync_seconds", sync_seconds},
                 {"rss_before_objects_mib", rss_empty},
                 {"rss_after_objects_mib", rss_created},
                 {"rss_after_sync_mib", rss_synced},
                 {"informer_rss_mib", rss_synced - rss_created},
                 {"informer_rss_trimmed_mib", rss_synced_trimmed - rss_created_trimmed}};
  return out;
}

int run_informer_child(const std::string& url, int pods, int64_t page_size) {
  const double rss_start = proc_status_mib("VmRSS");
  auto client = make_client(url, 20, 30);  // ClientOptions' defaults: what the operator runs with
  auto informer = pods_informer(*client, page_size);
  const auto start = Clock::now();
  informer->start();
  require_sync(*informer, size_t(pods), std::chrono::seconds(300));
  const double sync_seconds = seconds_since(start);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the watch is open and idle
  const double rss_synced = proc_status_mib("VmRSS"), rss_peak = proc_status_mib("VmHWM");
  const json figures = {{"sync_seconds", sync_seconds},
                        {"rss_start_mib", rss_start},
                        {"rss_synced_mib", rss_synced},
                        {"rss_peak_mib", rss_peak},
                        {"rss_synced_trimmed_mib", live_rss_mib()}};
  informer->stop();
  std::printf("%s\n", figures.dump().c_str());
  std::fflush(stdout);
  return 0;
}

json informer_scale_separate(const std::string& server_binary, int pods, int64_t page_size) {
  ChildProcess server({server_binary, "--port", "0"});
  const std::string url = server.read_line();
  if (url.rfind("http://", 0) != 0) throw std::runtime_error(server_binary + " printed '" + url + "', not its URL");
  auto client = make_client(url, 0, 0);
  create_namespace(*client, kPodNamespace);
  create_objects(*client, kube::pods_type(), kPodNamespace, pods, pod_object);
  ChildProcess child({self_path(), "--informer-child", url, std::to_string(pods), std::to_string(page_size)});
  const std::string line = child.read_line();
  const int code = child.wait();
  if (code != 0 || line.empty()) {
    throw std::runtime_error("the informer child process failed (exit code " + std::to_string(code) +
                             "); its errors are above");
  }
  return json::parse(line);
}

json event_latency(controller::Informer& informer, const std::string& url, int pods, int rate, int seconds) {
  std::mutex mu;
  std::unordered_map<std::string, Clock::time_point> queued;  // "ns/name@rv" -> when its key was queued
  controller::WorkQueue queue("bench-latency");
  controller::EventHandler handler;
  handler.on_update = [&](const json&, const json& object) {
    std::string key = controller::key_of(object);
    queue.add(key);
    const auto now = Clock::now();
    std::string id = std::move(key) + "@" + controller::resource_version_of(object);
    std::lock_guard<std::mutex> lock(mu);
    queued.emplace(std::move(id), now);
  };
  informer.add_handler(handler);

  struct Write {
    std::string id;
    Clock::time_point before;
  };
  auto writer = make_client(url, 0, 0);
  const int total = rate * seconds;
  std::vector<Write> writes;
  writes.reserve(size_t(total));
  const auto period = std::chrono::nanoseconds(1000000000LL / rate);
  const auto start = Clock::now();
  for (int i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start + period * i);  // behind schedule: no sleep, catch up
    const std::string name = numbered("trainer-", i % pods);
    const json patch = {{"metadata", {{"labels", {{"bench-seq", std::to_string(i + 1)}}}}}};
    const auto before = Clock::now();
    const json written = writer->patch_merge(kube::pods_type(), kPodNamespace, name, patch);
    writes.push_back({kube::object_key(kPodNamespace, name) + "@" + controller::resource_version_of(written), before});
  }
  const double write_seconds = seconds_since(start);
  const auto deadline = Clock::now() + std::chrono::seconds(5);  // for the last events
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (queued.size() >= writes.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<double> ms;
  int missed = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Write& w : writes) {
      auto it = queued.find(w.id);
      if (it == queued.end()) {
        ++missed;
      } else {
        ms.push_back(std::chrono::duration<double, std::milli>(it->second - w.before).count());
      }
    }
  }
  std::sort(ms.begin(), ms.end());
  return {{"writes", total},
          {"achieved_rate", double(total) / write_seconds},
          {"missed", missed},
          {"p50_ms", percentile(ms, 0.50)},
          {"p99_ms", percentile(ms, 0.99)},
          {"max_ms", ms.empty() ? 0.0 : ms.back()}};
}

double reconcile_throughput(kube::KubeClient& client, int objects, int workers, int64_t page_size) {
  controller::Informer informer(
      std::make_shared<controller::KubeListWatcher>(client, kube::config_maps_type(), kConfigMapNamespace),
      informer_options("configmaps", page_size));
  informer.start();
  require_sync(informer, size_t(objects), std::chrono::seconds(60));

  std::mutex mu;
  std::condition_variable all_done;
  std::set<std::string> reconciled;
  controller::ControllerOptions options;
  options.name = "bench-" + std::to_string(workers);
  options.max_concurrent_reconciles = workers;
  controller::Controller controller(std::move(options), [&](const std::string& key) {
    if (!informer.get(key)) throw std::runtime_error(key + " is not in the informer's cache");
    std::lock_guard<std::mutex> lock(mu);
    if (reconciled.insert(key).second && reconciled.size() == size_t(objects)) all_done.notify_all();
    return controller::ReconcileResult{};
  });
  const auto start = Clock::now();
  controller.watch_for(informer);  // queues every cached key
  controller.start();
  std::unique_lock<std::mutex> lock(mu);
  if (!all_done.wait_for(lock, std::chrono::seconds(120), [&] { return reconciled.size() == size_t(objects); })) {
    throw std::runtime_error("only " + std::to_string(reconciled.size()) + " of " + std::to_string(objects) +
                             " keys were reconciled within 120 s");
  }
  const double seconds = seconds_since(start);
  lock.unlock();
  controller.stop();
  informer.stop();
  return seconds;
}

}  // namespace qsync::operator_bench
