// File: tests/operator/controller/fake_list_watcher.h
// A scripted ListWatcher for informer, controller and manager tests: an in-memory API server of
// one resource type with a numeric resourceVersion and an event history, plus faults to inject:
// failing lists or watches (transport errors, 410 Gone), ending open watches (as a server
// timeout or a dropped connection), an ERROR 410 event mid-stream, compacting the history (a
// watch from an older version answers 410), holding events back (a gap), and sending every
// event twice. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "operator/controller/list_watcher.h"

namespace qsync::controller_test {

using nlohmann::json;

json make_object(const std::string& ns, const std::string& name, const json& spec = json::object());

class FakeListWatcher : public controller::ListWatcher {
 public:
  // Writes: each gets the next resourceVersion and goes to the history. upsert() of a new key is
  // ADDED, of an existing one MODIFIED. Returns the object as stored.
  json upsert(json object);
  void erase(const std::string& ns, const std::string& name);

  // Faults.
  void fail_next_lists(int count);              // transport errors (KubeError code 0)
  void fail_next_watches(int count, int code);  // KubeError with `code` when a watch starts
  void end_watches();                           // open watches return, as a server timeout
  void send_gone_to_watches();                  // open watches get an ERROR event with code 410
  void compact();                               // watches from before now answer 410
  void hold_events(bool hold);                  // open watches deliver nothing while held
  void duplicate_events(bool duplicate);        // every event is delivered twice

  kube::ListResult list(const kube::ListOptions& options) override;
  std::string watch(const kube::WatchOptions& options, const std::function<bool(const kube::WatchEvent&)>& on_event,
                    const std::atomic<bool>* stop) override;
  std::string describe() const override { return "fake"; }

  int list_calls() const;
  int watch_calls() const;
  std::vector<std::string> watch_resource_versions() const;  // what each watch asked to start from
  std::string current_resource_version() const;

 private:
  struct Entry {
    int64_t rv;
    kube::WatchEvent event;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, json> objects_;
  std::vector<Entry> history_;
  int64_t rv_ = 100;
  int64_t compacted_rv_ = 0;
  int fail_lists_ = 0;
  int fail_watches_ = 0;
  int fail_watch_code_ = 0;
  int end_generation_ = 0;
  int gone_generation_ = 0;
  bool hold_ = false;
  bool duplicate_ = false;
  int list_calls_ = 0;
  int watch_calls_ = 0;
  std::vector<std::string> watch_rvs_;
};

}  // namespace qsync::controller_test
