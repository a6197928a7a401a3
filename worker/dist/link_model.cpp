// File: worker/dist/link_model.cpp
// The slow-link model: parsing "--link LATENCY,BANDWIDTH", the ring formulas for the emulated time
// of each collective, and the Collectives decorator that runs the real collective and then waits
// until the emulated time has passed since the call started (a collective takes max(real,
// emulated)). The wait sleeps for most of the remainder and spins the last SPIN_SECONDS, because
// sleep_for overshoots by tens of microseconds and a 50 us latency must still be honoured.
#include "worker/dist/link_model.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace qsync {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double SPIN_SECONDS = 100e-6;  // busy-wait this much of the remainder, sleep the rest

const char* const ACCEPTED_FORM =
    "expected LATENCY,BANDWIDTH such as 50us,10GB/s or 1ms,100MB/s (latency units ns|us|ms|s, bandwidth "
    "units B/s|KB/s|MB/s|GB/s|KiB/s|MiB/s|GiB/s), just one of the two (50us or 10GB/s), or none";

struct Unit {
  const char* suffix;
  double scale;  // seconds per unit, or bytes per second per unit
};

constexpr Unit LATENCY_UNITS[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
constexpr Unit BANDWIDTH_UNITS[] = {{"KiB/s", 1024.0},     {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
                                    {"KB/s", 1e3},         {"MB/s", 1e6},        {"GB/s", 1e9},
                                    {"B/s", 1.0}};

[[noreturn]] void reject(const std::string& text, const std::string& why) {
  throw std::invalid_argument("--link '" + text + "': " + why + "; " + ACCEPTED_FORM);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "12.5" -> 12.5; the whole string must be a finite non-negative decimal number.
double parse_amount(const std::string& number, const std::string& text, const std::string& part) {
  if (number.empty() || !(std::isdigit(static_cast<unsigned char>(number[0])) || number[0] == '.')) {
    reject(text, part + " '" + number + "' does not start with a number");
  }
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) {
    reject(text, part + " '" + number + "' is not a number");
  }
  return v;
}

// One part with its unit, e.g. "50us" with LATENCY_UNITS -> 5e-5. Returns false when no unit fits.
template <size_t N>
bool parse_with_units(const std::string& part, const Unit (&units)[N], const std::string& text,
                      const std::string& what, double& value) {
  for (const Unit& u : units) {
    if (ends_with(part, u.suffix)) {
      value = parse_amount(part.substr(0, part.size() - std::char_traits<char>::length(u.suffix)), text, what) * u.scale;
      return true;
    }
  }
  return false;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "%g" of value / scale with the unit, e.g. (5e-5, 1e-6, "us") -> "50us".
std::string with_unit(double value, double scale, const char* unit) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%g%s", value / scale, unit);
  return buffer;
}

void wait_until(Clock::time_point deadline) {
  const auto spin = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(SPIN_SECONDS));
  const auto now = Clock::now();
  if (deadline - now > spin) std::this_thread::sleep_for(deadline - now - spin);
  while (Clock::now() < deadline) {
  }
}

// The decorator: every call runs on `inner_`, then waits out the rest of the emulated time.
class LinkCollectives final : public Collectives {
 public:
  LinkCollectives(std::unique_ptr<Collectives> inner, const LinkModel& link)
      : inner_(std::move(inner)), link_(link),
        backend_(std::string(inner_->backend()) + "+link(" + link.describe() + ")") {}

  const char* backend() const override { return backend_.c_str(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }

  void all_reduce_sum(float* data, int64_t count) override {
    const auto start = Clock::now();
    inner_->all_reduce_sum(data, count);
    if (count > 0) wait_until(start, link_all_reduce_seconds(link_, count * int64_t(sizeof(float)), world_size()));
  }
  void all_reduce_sum(double* data, int64_t count) override {
    const auto start = Clock::now();
    inner_->all_reduce_sum(data, count);
    if (count > 0) wait_until(start, link_all_reduce_seconds(link_, count * int64_t(sizeof(double)), world_size()));
  }
  void broadcast(float* data, int64_t count, int root) override {
    const auto start = Clock::now();
    inner_->broadcast(data, count, root);
    if (count > 0) wait_until(start, link_broadcast_seconds(link_, count * int64_t(sizeof(float)), world_size()));
  }
  // A ring all-gather moves what a broadcast of the whole output (world * count values) moves.
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    const auto start = Clock::now();
    inner_->all_gather(in, out, count);
    if (count > 0) {
      const int64_t total_bytes = count * int64_t(sizeof(uint64_t)) * world_size();
      wait_until(start, link_broadcast_seconds(link_, total_bytes, world_size()));
    }
  }
  void barrier() override {
    const auto start = Clock::now();
    inner_->barrier();
    wait_until(start, link_all_reduce_seconds(link_, 0, world_size()));
  }

 private:
  static void wait_until(Clock::time_point start, double seconds) {
    if (seconds <= 0) return;
    qsync::wait_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  }

  std::unique_ptr<Collectives> inner_;
  LinkModel link_;
  std::string backend_;  // "gloo+link(50us,10GB/s)"
};

}  // namespace

std::string LinkModel::describe() const {
  if (!enabled()) return "none";
  std::string latency;
  if (latency_seconds > 0 || bytes_per_second <= 0) {
    if (latency_seconds >= 1.0) latency = with_unit(latency_seconds, 1.0, "s");
    else if (latency_seconds >= 1e-3) latency = with_unit(latency_seconds, 1e-3, "ms");
    else if (latency_seconds >= 1e-6) latency = with_unit(latency_seconds, 1e-6, "us");
    else latency = with_unit(latency_seconds, 1e-9, "ns");
  }
  if (bytes_per_second <= 0) return latency;  // latency only: no bandwidth term
  std::string bandwidth;
  if (bytes_per_second >= 1e9) bandwidth = with_unit(bytes_per_second, 1e9, "GB/s");
  else if (bytes_per_second >= 1e6) bandwidth = with_unit(bytes_per_second, 1e6, "MB/s");
  else if (bytes_per_second >= 1e3) bandwidth = with_unit(bytes_per_second, 1e3, "KB/s");
  else bandwidth = with_unit(bytes_per_second, 1.0, "B/s");
  return latency.empty() ? bandwidth : latency + "," + bandwidth;
}

LinkModel link_model_parse(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) reject(text, "the value is empty");
  if (t == "none") return {};
  LinkModel link;
  const size_t comma = t.find(',');
  if (comma == std::string::npos) {  // one part: a latency or a bandwidth
    if (parse_with_units(t, BANDWIDTH_UNITS, text, "bandwidth", link.bytes_per_second)) {
      if (!(link.bytes_per_second > 0)) reject(text, "the bandwidth must be positive");
      return link;
    }
    if (!parse_with_units(t, LATENCY_UNITS, text, "latency", link.latency_seconds)) {
      reject(text, "'" + t + "' has no latency or bandwidth unit");
    }
    if (!(link.latency_seconds > 0)) reject(text, "a latency-only link needs a positive latency (or use none)");
    return link;
  }
  if (t.find(',', comma + 1) != std::string::npos) reject(text, "more than two parts");
  const std::string latency = trim(t.substr(0, comma)), bandwidth = trim(t.substr(comma + 1));
  if (!parse_with_units(latency, LATENCY_UNITS, text, "latency", link.latency_seconds)) {
    reject(text, "the latency '" + latency + "' needs a unit ns, us, ms or s");
  }
  if (!parse_with_units(bandwidth, BANDWIDTH_UNITS, text, "bandwidth", link.bytes_per_second)) {
    reject(text, "the bandwidth '" + bandwidth + "' needs a unit B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s or GiB/s");
  }
  if (!(link.bytes_per_second > 0)) reject(text, "the bandwidth must be positive");
  return link;
}

double link_all_reduce_seconds(const LinkModel& link, int64_t bytes, int world) {
  if (!link.enabled() || world <= 1) return 0.0;
  const double steps = 2.0 * double(world - 1);
  const double transfer = link.bytes_per_second > 0 ? steps / double(world) * double(bytes) / link.bytes_per_second : 0.0;
  return steps * link.latency_seconds + transfer;
}

double link_broadcast_seconds(const LinkModel& link, int64_t bytes, int world) {
  if (!link.enabled() || world <= 1) return 0.0;
  const double steps = double(world - 1);
  const double transfer = link.bytes_per_second > 0 ? steps / double(world) * double(bytes) / link.bytes_per_second : 0.0;
  return steps * link.latency_seconds + transfer;
}

std::unique_ptr<Collectives> collectives_with_link(std::unique_ptr<Collectives> inner, const LinkModel& link) {
  if (!inner) throw std::invalid_argument("collectives_with_link: no collectives to wrap (inner is null)");
  if (!link.enabled()) return inner;
  if (link.latency_seconds < 0 || link.bytes_per_second < 0) {
    throw std::invalid_argument("collectives_with_link: negative latency or bandwidth in link " + link.describe() +
                                "; build the link with link_model_parse (e.g. \"50us,10GB/s\")");
  }
  return std::make_unique<LinkCollectives>(std::move(inner), link);
}

}  // namespace qsync
