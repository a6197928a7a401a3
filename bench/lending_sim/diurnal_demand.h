// File: bench/lending_sim/diurnal_demand.h
// A synthetic day of inference demand for the lending simulation: requests per second that
// peak at one hour and bottom out at another (Runway reports a peak around 9am ET and a trough
// around 8pm ET, the trough under half the peak), joined by half-cosines, times a slow
// multiplicative noise (an AR(1) process per minute, deterministic from the seed).
//
//   const DiurnalDemand d({.peak_rps = 700, .trough_fraction = 0.35});
//   d.rate(t)   // t: seconds since midnight UTC of the simulated day (wraps around)
#pragma once

#include <cstdint>
#include <vector>

namespace qsync::lending_sim {

struct DiurnalDemandConfig {
  double peak_rps = 700;
  double trough_fraction = 0.35;  // trough / peak (< 0.5: under half the peak)
  double peak_hour_utc = 14;      // 9am US Eastern (EST)
  double trough_hour_utc = 1;     // 8pm US Eastern
  double noise = 0.04;            // standard deviation of the multiplicative noise
  double noise_correlation = 0.9; // AR(1) coefficient from one minute to the next
  uint64_t seed = 1;
};

class DiurnalDemand {
 public:
  explicit DiurnalDemand(DiurnalDemandConfig config);
  double rate(double seconds_since_midnight) const;  // requests per second
  const DiurnalDemandConfig& config() const { return config_; }

 private:
  double shape(double hour) const;  // 0 at the trough, 1 at the peak
  DiurnalDemandConfig config_;
  std::vector<double> noise_;  // per minute of the day
};

}  // namespace qsync::lending_sim
