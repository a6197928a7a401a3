// File: operator/controller/leader_election.cpp
// The Lease-based elector: acquire, renew, step down, release.
#include "operator/controller/leader_election.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "operator/controller/micro_time.h"
#include "operator/controller/operator_metrics.h"
#include "operator/kube/kube_error.h"
#include "operator/kube/resource.h"

namespace qsync::controller {

using nlohmann::json;

namespace {

std::string default_identity() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::mt19937_64 rng{std::random_device{}()};
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(host[0] ? host : "operator") + "_" + suffix;
}

int whole_seconds(std::chrono::milliseconds d) {
  return std::max(1, static_cast<int>(std::ceil(static_cast<double>(d.count()) / 1000.0)));
}

}  // namespace

LeaderElector::LeaderElector(kube::KubeClient& client, LeaderElectionOptions options)
    : client_(client), options_(std::move(options)) {
  if (options_.lease_name.empty()) throw std::invalid_argument("leader election needs a lease name");
  if (options_.lease_duration <= options_.renew_deadline) {
    throw std::invalid_argument("leader election: the lease duration must be longer than the renew deadline");
  }
  if (options_.renew_deadline.count() <= 1.2 * static_cast<double>(options_.retry_period.count())) {
    throw std::invalid_argument("leader election: the renew deadline must exceed 1.2 x the retry period");
  }
  if (options_.identity.empty()) options_.identity = default_identity();
}

LeaderElector::~LeaderElector() { stop(); }

void LeaderElector::start() {
  if (thread_.joinable()) throw std::logic_error("LeaderElector for lease " + options_.lease_name + " started twice");
  stop_ = false;
  set_leading(false);
  thread_ = std::thread([this] { run(); });
}

void LeaderElector::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string LeaderElector::leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observed_holder_;
}

bool LeaderElector::sleep_unless_stopped(std::chrono::milliseconds duration) {
  std::unique_lock<std::mutex> lock(mu_);
  return stop_cv_.wait_for(lock, duration, [this] { return stop_.load(); });
}

void LeaderElector::set_leading(bool leading) {
  leading_ = leading;
  if (options_.metrics) options_.metrics->set_leader(options_.lease_name, leading);
}

void LeaderElector::run() {
  std::mt19937 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(1.0, 1.2);
  while (!stop_) {
    if (!try_acquire_or_renew()) {
      const auto wait = std::chrono::milliseconds(
          static_cast<int64_t>(static_cast<double>(options_.retry_period.count()) * jitter(rng)));
      if (sleep_unless_stopped(wait)) break;
      continue;
    }
    set_leading(true);
    std::fprintf(stderr, "leader election: %s acquired lease %s/%s\n", options_.identity.c_str(),
                 options_.lease_namespace.c_str(), options_.lease_name.c_str());
    if (options_.on_started_leading) options_.on_started_leading();
    Clock::time_point last_renewal = Clock::now();
    while (!sleep_unless_stopped(options_.retry_period)) {
      if (try_acquire_or_renew()) {
        last_renewal = Clock::now();
      } else if (Clock::now() - last_renewal >= options_.renew_deadline) {
        break;
      }
    }
    const bool releasing = stop_ && options_.release_on_cancel;
    if (releasing) release();
    set_leading(false);
    std::fprintf(stderr, "leader election: %s %s lease %s/%s\n", options_.identity.c_str(),
                 !stop_ ? "failed to renew within the deadline and lost"
                        : (releasing ? "stopped leading and released" : "stopped leading without releasing"),
                 options_.lease_namespace.c_str(), options_.lease_name.c_str());
    if (options_.on_stopped_leading) options_.on_stopped_leading();
  }
}

void LeaderElector::observe(const json& spec, Clock::time_point now) {
  std::string holder = spec.value("holderIdentity", "");
  bool new_leader = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string dumped = spec.dump();
    if (dumped != observed_spec_) {
      observed_spec_ = dumped;
      observed_time_ = now;
    }
    if (holder != observed_holder_) {
      observed_holder_ = holder;
      new_leader = !holder.empty();
    }
  }
  if (new_leader && options_.on_new_leader) options_.on_new_leader(holder);
}

bool LeaderElector::try_acquire_or_renew() {
  const Clock::time_point now = Clock::now();
  const std::string now_text = micro_time_now();
  const kube::ResourceType& leases = kube::leases_type();
  try {
    std::optional<json> lease = client_.get_if_exists(leases, options_.lease_namespace, options_.lease_name);
    if (!lease) {
      json created = {{"apiVersion", leases.api_version()},
                      {"kind", leases.kind},
                      {"metadata", {{"name", options_.lease_name}, {"namespace", options_.lease_namespace}}},
                      {"spec",
                       {{"holderIdentity", options_.identity},
                        {"leaseDurationSeconds", whole_seconds(options_.lease_duration)},
                        {"acquireTime", now_text},
                        {"renewTime", now_text},
                        {"leaseTransitions", 0}}}};
      json answer = client_.create(leases, options_.lease_namespace, created);
      observe(answer.value("spec", json::object()), now);
      return true;
    }
    json spec = lease->value("spec", json::object());
    observe(spec, now);
    const std::string holder = spec.value("holderIdentity", "");
    if (!holder.empty() && holder != options_.identity) {
      const int seconds = spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number_integer()
                              ? spec["leaseDurationSeconds"].get<int>()
                              : whole_seconds(options_.lease_duration);
      std::lock_guard<std::mutex> lock(mu_);
      if (observed_time_ + std::chrono::seconds(seconds) > now) return false;  // held and not expired
    }
    const bool renewing = holder == options_.identity;
    const int transitions = spec.value("leaseTransitions", 0);
    spec["holderIdentity"] = options_.identity;
    spec["leaseDurationSeconds"] = whole_seconds(options_.lease_duration);
    spec["renewTime"] = now_text;
    if (!renewing || !spec.contains("acquireTime")) spec["acquireTime"] = now_text;
    spec["leaseTransitions"] = renewing ? transitions : transitions + 1;
    (*lease)["spec"] = spec;
    json answer = client_.update(leases, *lease);
    observe(answer.value("spec", json::object()), now);
    return true;
  } catch (const std::exception& e) {
    // A Conflict or AlreadyExists means another candidate wrote first: try again next period.
    if (!kube::is_conflict(e) && !kube::is_already_exists(e)) {
      std::fprintf(stderr, "leader election: cannot read or write lease %s/%s: %s\n", options_.lease_namespace.c_str(),
                   options_.lease_name.c_str(), e.what());
    }
    return false;
  }
}

void LeaderElector::release() {
  const kube::ResourceType& leases = kube::leases_type();
  try {
    std::optional<json> lease = client_.get_if_exists(leases, options_.lease_namespace, options_.lease_name);
    if (!lease || lease->value("spec", json::object()).value("holderIdentity", "") != options_.identity) return;
    const std::string now_text = micro_time_now();
    json& spec = (*lease)["spec"];
    spec["holderIdentity"] = "";
    spec["leaseDurationSeconds"] = 1;
    spec["acquireTime"] = now_text;
    spec["renewTime"] = now_text;
    client_.update(leases, *lease);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leader election: could not release lease %s/%s (another candidate takes over when it "
                 "expires): %s\n", options_.lease_namespace.c_str(), options_.lease_name.c_str(), e.what());
  }
}

}  // namespace qsync::controller
