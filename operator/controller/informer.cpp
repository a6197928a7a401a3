// File: operator/controller/informer.cpp
// The shared informer: cache, reflector loop (list, watch, resume, relist on 410, back off on
// transport errors), resync, and in-order delivery to handlers.
#include "operator/controller/informer.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <random>
#include <stdexcept>

namespace qsync::controller {

std::string key_of(const json& object) {
  const json& meta = object.contains("metadata") ? object["metadata"] : json::object();
  const std::string ns = meta.value("namespace", "");
  const std::string name = meta.value("name", "");
  return kube::object_key(ns, name);
}

std::string resource_version_of(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
  return object["metadata"].value("resourceVersion", "");
}

Informer::Informer(std::shared_ptr<ListWatcher> source, InformerOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  if (!source_) throw std::invalid_argument("Informer '" + options_.name + "' needs a ListWatcher");
  if (options_.name.empty()) options_.name = source_->describe();
  if (options_.min_watch_timeout_seconds <= 0 ||
      options_.max_watch_timeout_seconds < options_.min_watch_timeout_seconds) {
    throw std::invalid_argument("Informer '" + options_.name +
                                "': watch timeouts need 0 < min_watch_timeout_seconds <= max_watch_timeout_seconds");
  }
}

Informer::~Informer() { stop(); }

void Informer::add_handler(EventHandler handler) {
  std::lock_guard<std::mutex> ordered(deliver_mu_);
  if (handler.on_add) {
    std::vector<json> snapshot;
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      for (const auto& [key, object] : cache_) snapshot.push_back(object);
    }
    for (const json& object : snapshot) handler.on_add(object);
  }
  handlers_.push_back(std::move(handler));
}

void Informer::start() {
  if (reflector_.joinable()) throw std::logic_error("Informer '" + options_.name + "' started twice");
  stop_ = false;
  reflector_ = std::thread([this] { run_reflector(); });
  if (options_.resync_period.count() > 0) resync_ = std::thread([this] { run_resync(); });
}

void Informer::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (reflector_.joinable()) reflector_.join();
  if (resync_.joinable()) resync_.join();
}

bool Informer::has_synced() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return synced_;
}

bool Informer::wait_for_sync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(cache_mu_);
  return synced_cv_.wait_for(lock, timeout, [this] { return synced_; });
}

std::optional<json> Informer::get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Informer::list() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  std::vector<json> objects;
  objects.reserve(cache_.size());
  for (const auto& [key, object] : cache_) objects.push_back(object);
  return objects;
}

size_t Informer::size() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return cache_.size();
}

std::string Informer::last_resource_version() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return resource_version_;
}

bool Informer::sleep_unless_stopped(std::chrono::milliseconds duration) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return stop_cv_.wait_for(lock, duration, [this] { return stop_.load(); });
}

void Informer::run_reflector() {
  bool need_list = true;
  std::chrono::milliseconds backoff = options_.initial_backoff;
  while (!stop_) {
    bool listing = need_list;
    try {
      if (need_list) {
        relist();
        need_list = false;
        listing = false;
      }
      watch_once(last_resource_version());
      backoff = options_.initial_backoff;
      continue;
    } catch (const std::exception& e) {
      if (stop_) break;
      if (kube::is_gone(e) && !listing) {
        std::fprintf(stderr, "informer %s: resourceVersion %s is gone (410), listing again\n",
                     options_.name.c_str(), last_resource_version().c_str());
        need_list = true;
        continue;
      }
      std::fprintf(stderr, "informer %s: %s failed, retrying in %lld ms: %s\n", options_.name.c_str(),
                   listing ? "list" : "watch", static_cast<long long>(backoff.count()), e.what());
    }
    if (sleep_unless_stopped(backoff)) break;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

std::string Informer::relist() {
  kube::ListOptions options;
  options.limit = options_.page_size;
  kube::ListResult result = source_->list(options);
  ++lists_;

  std::lock_guard<std::mutex> ordered(deliver_mu_);
  std::map<std::string, json> fresh;
  for (json& item : result.items) {
    std::string key = key_of(item);
    fresh[key] = std::move(item);
  }
  // The changes name their objects by key (the new state lives in cache_, which only this thread
  // changes, under deliver_mu_); only the old states of changed or vanished objects are kept.
  struct Pending {
    Change change;
    std::string key;
    json old_object;  // MODIFIED: the replaced state; DELETED: the last state known
  };
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (const auto& [key, object] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        pending.push_back({Change::ADDED, key, json()});
      } else if (resource_version_of(it->second) != resource_version_of(object)) {
        pending.push_back({Change::MODIFIED, key, std::move(it->second)});
      }
    }
    for (auto& [key, object] : cache_) {
      if (!fresh.count(key)) pending.push_back({Change::DELETED, key, std::move(object)});
    }
    cache_ = std::move(fresh);
    resource_version_ = result.resource_version;
  }
  for (const Pending& p : pending) {
    if (p.change == Change::DELETED) {
      deliver(p.change, nullptr, p.old_object);
    } else {
      deliver(p.change, p.change == Change::MODIFIED ? &p.old_object : nullptr, cache_.at(p.key));
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    synced_ = true;
  }
  synced_cv_.notify_all();
  return result.resource_version;
}

void Informer::watch_once(const std::string& resource_version) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> timeout(options_.min_watch_timeout_seconds, options_.max_watch_timeout_seconds);
  kube::WatchOptions options;
  options.resource_version = resource_version;
  options.allow_bookmarks = true;
  options.timeout_seconds = timeout(rng);
  ++watches_;
  // An error raised while applying an event (an ERROR event) is carried out of the stream rather
  // than thrown through the client's reader.
  std::exception_ptr failure;
  source_->watch(
      options,
      [&](const kube::WatchEvent& event) {
        if (stop_) return false;
        try {
          apply_event(event);
          return true;
        } catch (...) {
          failure = std::current_exception();
          return false;
        }
      },
      &stop_);
  if (failure) std::rethrow_exception(failure);
}

void Informer::apply_event(const kube::WatchEvent& event) {
  if (event.type == "ERROR") {
    const json& status = event.object;
    throw kube::KubeError(status.value("code", 500), status.value("reason", "InternalError"),
                          status.value("message", "watch ERROR event"), "watch", source_->describe());
  }
  const std::string rv = resource_version_of(event.object);
  std::lock_guard<std::mutex> ordered(deliver_mu_);
  if (event.type == "BOOKMARK") {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (!rv.empty()) resource_version_ = rv;
    return;
  }
  if (event.type != "ADDED" && event.type != "MODIFIED" && event.type != "DELETED") {
    std::fprintf(stderr, "informer %s: ignoring watch event of unknown type '%s'\n", options_.name.c_str(),
                 event.type.c_str());
    return;
  }
  const std::string key = key_of(event.object);
  std::optional<json> old_object;
  Change change;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (!rv.empty()) resource_version_ = rv;
    auto it = cache_.find(key);
    if (event.type == "DELETED") {
      if (it == cache_.end()) return;  // already gone: a repeated event
      cache_.erase(it);
      change = Change::DELETED;
    } else if (it == cache_.end()) {
      cache_[key] = event.object;
      change = Change::ADDED;
    } else {
      if (resource_version_of(it->second) == rv) return;  // a repeated event
      old_object = it->second;
      it->second = event.object;
      change = Change::MODIFIED;
    }
  }
  deliver(change, old_object ? &*old_object : nullptr, event.object);
}

void Informer::deliver(Change change, const json* old_object, const json& object) {
  for (const EventHandler& handler : handlers_) {
    try {
      if (change == Change::ADDED && handler.on_add) handler.on_add(object);
      if (change == Change::MODIFIED && handler.on_update) handler.on_update(*old_object, object);
      if (change == Change::DELETED && handler.on_delete) handler.on_delete(object);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "informer %s: a handler threw on %s: %s\n", options_.name.c_str(), key_of(object).c_str(),
                   e.what());
    }
  }
}

void Informer::run_resync() {
  while (!sleep_unless_stopped(options_.resync_period)) {
    std::lock_guard<std::mutex> deliver_lock(deliver_mu_);
    std::vector<json> snapshot = list();
    for (const json& object : snapshot) deliver(Change::MODIFIED, &object, object);
  }
}

}  // namespace qsync::controller
