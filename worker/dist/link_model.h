// File: worker/dist/link_model.h
// Slow-link emulation: our ranks share one machine, where an all-reduce costs far less than across
// GPUs over PCIe or between nodes. A link model (fixed latency + bytes / bandwidth) wraps any
// Collectives and, after each real collective, waits until the emulated transfer time has passed
// (measured from the call's start), so a collective takes max(real, emulated).
//
//   --link 50us,10GB/s      latency 50 microseconds, 10 GB/s (10^9 bytes/s; GiB/s = 2^30 also accepted)
//   --link 1ms,100MB/s      units: ns|us|ms|s and B/s|KB/s|MB/s|GB/s|KiB/s|MiB/s|GiB/s
//   --link none             no emulation
//   --link 50us / 10GB/s    one part only: latency without a bandwidth term, or bandwidth with zero latency
// Emulated time of an all-reduce of n bytes over N ranks (ring): 2 (N-1) latency + 2 (N-1)/N n / bandwidth;
// broadcast and all-gather: (N-1) latency + (N-1)/N n / bandwidth; barrier: 2 (N-1) latency.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "worker/dist/collectives.h"

namespace qsync {

struct LinkModel {
  double latency_seconds = 0;
  double bytes_per_second = 0;  // 0 with latency 0: no emulation
  bool enabled() const { return latency_seconds > 0 || bytes_per_second > 0; }
  std::string describe() const;  // "50us,10GB/s" (or "none")
};

// Parses the --link forms above; throws std::invalid_argument naming the text and the accepted form.
LinkModel link_model_parse(const std::string& text);

// Emulated seconds of one collective moving `bytes` per rank over `world` ranks.
double link_all_reduce_seconds(const LinkModel& link, int64_t bytes, int world);
double link_broadcast_seconds(const LinkModel& link, int64_t bytes, int world);

// Wraps `inner`; backend() reports e.g. "gloo+link(50us,10GB/s)". With a disabled link, returns
// `inner` unchanged.
std::unique_ptr<Collectives> collectives_with_link(std::unique_ptr<Collectives> inner, const LinkModel& link);

}  // namespace qsync
