// File: operator/controller/work_queue.h
// The controller's work queue of "namespace/name" keys, as client-go's rate-limited delaying
// queue. A key is queued at most once (the dirty set) and handed to at most one worker at a time
// (the processing set): N events for one object collapse into one reconcile, and a key added
// while it is being processed is queued again, once, when the worker calls done(). add_after()
// holds keys in a delay heap served by a timer thread; add_rate_limited() delays by the rate
// limiter (exponential per key, token bucket overall). Thread-safe.
//
//   WorkQueue q("jobs");
//   q.add("ns/a");
//   while (auto key = q.get()) { reconcile(*key); q.forget(*key); q.done(*key); }
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "operator/controller/rate_limiter.h"

namespace qsync::controller {

// What a queue reports to the operator's metrics (OperatorMetrics::work_queue_metrics makes one
// feeding workqueue_*{name}). Calls come from any thread.
class WorkQueueMetrics {
 public:
  virtual ~WorkQueueMetrics() = default;
  virtual void added() = 0;                          // workqueue_adds_total
  virtual void depth_changed(int64_t depth) = 0;     // workqueue_depth
  virtual void retried() = 0;                        // workqueue_retries_total
  virtual void queued_for(double seconds) = 0;       // add -> get: workqueue_queue_duration_seconds
  virtual void worked_for(double seconds) = 0;       // get -> done: workqueue_work_duration_seconds
};

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;

  // `limiter` null: default_controller_rate_limiter(). `metrics` may be null.
  explicit WorkQueue(std::string name, std::unique_ptr<RateLimiter> limiter = nullptr,
                     std::shared_ptr<WorkQueueMetrics> metrics = nullptr);
  ~WorkQueue();  // shut_down()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  const std::string& name() const { return name_; }

  // Queues `key` unless it is already queued; a key being processed is queued again when done.
  // Ignored after shut_down.
  void add(const std::string& key);
  // Queues `key` after `delay` (now when not positive). A key already waiting keeps the earlier
  // of its two ready times.
  void add_after(const std::string& key, Clock::duration delay);
  // Queues `key` after the rate limiter's delay for it and counts a retry.
  void add_rate_limited(const std::string& key);
  // Resets the rate limiter's backoff of `key`.
  void forget(const std::string& key);
  int num_requeues(const std::string& key);

  // Blocks until a key is ready and marks it processing; std::nullopt once shut down (keys still
  // queued are dropped: reconciles are level-triggered, the next run catches up).
  std::optional<std::string> get();
  // The worker finished `key`: queues it again if it was added meanwhile.
  void done(const std::string& key);

  // get() returns std::nullopt from now on and add() is ignored; stops the timer thread.
  void shut_down();
  // shut_down(), then waits until every key being processed is done().
  void shut_down_with_drain();
  bool shutting_down() const;

  int len() const;         // keys queued (not counting processing or waiting ones)
  int processing() const;  // keys handed out and not yet done

 private:
  struct Waiting {
    Clock::time_point ready;
    uint64_t sequence;  // FIFO among equal ready times
    std::string key;
    bool operator>(const Waiting& o) const {
      return ready != o.ready ? ready > o.ready : sequence > o.sequence;
    }
  };

  void add_locked(const std::string& key);
  void run_timer();

  std::string name_;
  std::unique_ptr<RateLimiter> limiter_;
  std::shared_ptr<WorkQueueMetrics> metrics_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;   // get() waits for keys or shutdown
  std::condition_variable drained_cv_; // shut_down_with_drain waits for processing to empty
  std::condition_variable timer_cv_;   // the timer thread waits for the next ready time
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;
  std::set<std::string> processing_;
  std::map<std::string, Clock::time_point> queued_at_;
  std::map<std::string, Clock::time_point> started_at_;
  std::priority_queue<Waiting, std::vector<Waiting>, std::greater<Waiting>> waiting_;
  std::map<std::string, Clock::time_point> waiting_ready_;  // key -> its earliest ready time
  uint64_t sequence_ = 0;
  bool shutting_down_ = false;
  std::thread timer_;
};

}  // namespace qsync::controller
