// File: operator/controller/controller.cpp
// Event handlers that map informer events to keys, the worker loop, and result handling.
#include "operator/controller/controller.h"

#include <cstdio>
#include <exception>
#include <set>

#include "operator/controller/operator_metrics.h"
#include "operator/controller/owner_refs.h"

namespace qsync::controller {

namespace {

int64_t generation_of(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return 0;
  const json& meta = object["metadata"];
  return meta.contains("generation") && meta["generation"].is_number() ? meta["generation"].get<int64_t>() : 0;
}

bool passes_create(const std::vector<Predicate>& predicates, const json& object) {
  for (const Predicate& p : predicates) {
    if (p.create && !p.create(object)) return false;
  }
  return true;
}

bool passes_update(const std::vector<Predicate>& predicates, const json& old_object, const json& new_object) {
  for (const Predicate& p : predicates) {
    if (p.update && !p.update(old_object, new_object)) return false;
  }
  return true;
}

bool passes_remove(const std::vector<Predicate>& predicates, const json& object) {
  for (const Predicate& p : predicates) {
    if (p.remove && !p.remove(object)) return false;
  }
  return true;
}

}  // namespace

Predicate generation_changed_predicate() {
  Predicate p;
  p.update = [](const json& old_object, const json& new_object) {
    return generation_of(old_object) != generation_of(new_object);
  };
  return p;
}

Controller::Controller(ControllerOptions options, Reconciler reconcile)
    : name_(std::move(options.name)),
      workers_(options.max_concurrent_reconciles),
      reconcile_(std::move(reconcile)),
      metrics_(options.metrics) {
  if (name_.empty()) throw std::invalid_argument("Controller needs a name (it labels its metrics and queue)");
  if (workers_ < 1) {
    throw std::invalid_argument("Controller '" + name_ + "': max_concurrent_reconciles must be at least 1");
  }
  if (!reconcile_) throw std::invalid_argument("Controller '" + name_ + "' needs a reconcile function");
  queue_ = std::make_unique<WorkQueue>(name_, std::move(options.rate_limiter),
                                       metrics_ ? metrics_->work_queue_metrics(name_) : nullptr);
  if (metrics_) {
    metrics_->set_max_concurrent_reconciles(name_, workers_);
    metrics_->set_active_workers(name_, 0);
  }
}

Controller::~Controller() {
  stop(std::chrono::milliseconds(0));
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Controller::watch_mapped(Informer& informer, std::function<std::vector<std::string>(const json&)> map_to_keys,
                              std::vector<Predicate> predicates) {
  WorkQueue* queue = queue_.get();
  auto enqueue = [queue, map_to_keys](const json& object) {
    for (const std::string& key : map_to_keys(object)) queue->add(key);
  };
  EventHandler handler;
  handler.on_add = [enqueue, predicates](const json& object) {
    if (passes_create(predicates, object)) enqueue(object);
  };
  handler.on_update = [queue, map_to_keys, predicates](const json& old_object, const json& new_object) {
    if (!passes_update(predicates, old_object, new_object)) return;
    // A child that changed owner notifies both owners (as controller-runtime's owner handler);
    // a key both map to is added once, or a worker taking the first add would run it twice.
    std::set<std::string> keys;
    for (std::string& key : map_to_keys(old_object)) keys.insert(std::move(key));
    for (std::string& key : map_to_keys(new_object)) keys.insert(std::move(key));
    for (const std::string& key : keys) queue->add(key);
  };
  handler.on_delete = [enqueue, predicates](const json& object) {
    if (passes_remove(predicates, object)) enqueue(object);
  };
  informer.add_handler(std::move(handler));
}

void Controller::watch_for(Informer& informer, std::vector<Predicate> predicates) {
  watch_mapped(informer, [](const json& object) { return std::vector<std::string>{key_of(object)}; },
               std::move(predicates));
}

void Controller::watch_owned(Informer& informer, const std::string& owner_api_version, const std::string& owner_kind,
                             std::vector<Predicate> predicates) {
  watch_mapped(
      informer,
      [owner_api_version, owner_kind](const json& child) {
        std::optional<std::string> key = owner_key_of(child, owner_api_version, owner_kind);
        return key ? std::vector<std::string>{*key} : std::vector<std::string>{};
      },
      std::move(predicates));
}

void Controller::start() {
  if (started_.exchange(true)) throw std::logic_error("Controller '" + name_ + "' started twice");
  for (int i = 0; i < workers_; ++i) {
    ++running_threads_;
    threads_.emplace_back([this] { run_worker(); });
  }
}

bool Controller::stop(std::chrono::milliseconds grace) {
  queue_->shut_down();
  std::unique_lock<std::mutex> lock(exit_mu_);
  const bool finished = exit_cv_.wait_for(lock, grace, [this] { return running_threads_.load() == 0; });
  lock.unlock();
  if (finished) {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  } else {
    std::fprintf(stderr, "controller %s: %d reconciles still running after the %lld ms shutdown grace\n",
                 name_.c_str(), active_workers_.load(), static_cast<long long>(grace.count()));
  }
  return finished;
}

void Controller::run_worker() {
  while (std::optional<std::string> key = queue_->get()) {
    const int active = ++active_workers_;
    if (metrics_) metrics_->set_active_workers(name_, active);
    reconcile_key(*key);
    queue_->done(*key);
    const int still = --active_workers_;
    if (metrics_) metrics_->set_active_workers(name_, still);
  }
  std::lock_guard<std::mutex> lock(exit_mu_);
  --running_threads_;
  exit_cv_.notify_all();
}

void Controller::record_reconcile(const std::string& result, std::chrono::steady_clock::time_point start) {
  if (!metrics_) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_->reconcile_finished(name_, result, seconds);
}

void Controller::reconcile_key(const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const ReconcileResult result = reconcile_(key);
    if (result.requeue_after && result.requeue_after->count() > 0) {
      queue_->forget(key);
      queue_->add_after(key, *result.requeue_after);
      record_reconcile("requeue_after", start);
    } else if (result.requeue) {
      queue_->add_rate_limited(key);
      record_reconcile("requeue", start);
    } else {
      queue_->forget(key);
      record_reconcile("success", start);
    }
  } catch (const TerminalError& e) {
    std::fprintf(stderr, "controller %s: reconcile %s failed for good (not retried): %s\n", name_.c_str(),
                 key.c_str(), e.what());
    queue_->forget(key);
    if (metrics_) {
      metrics_->reconcile_error(name_);
      metrics_->terminal_reconcile_error(name_);
    }
    record_reconcile("error", start);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "controller %s: reconcile %s failed, retrying with backoff: %s\n", name_.c_str(),
                 key.c_str(), e.what());
    queue_->add_rate_limited(key);
    if (metrics_) metrics_->reconcile_error(name_);
    record_reconcile("error", start);
  } catch (...) {
    std::fprintf(stderr, "controller %s: reconcile %s threw a non-standard exception (recovered), retrying\n",
                 name_.c_str(), key.c_str());
    queue_->add_rate_limited(key);
    if (metrics_) {
      metrics_->reconcile_panic(name_);
      metrics_->reconcile_error(name_);
    }
    record_reconcile("error", start);
  }
}

}  // namespace qsync::controller
