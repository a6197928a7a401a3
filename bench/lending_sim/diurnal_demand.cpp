// File: bench/lending_sim/diurnal_demand.cpp
// The synthetic diurnal demand curve (see diurnal_demand.h).
#include "bench/lending_sim/diurnal_demand.h"

#include <cmath>
#include <random>

namespace qsync::lending_sim {
namespace {

constexpr double PI = 3.14159265358979323846;

double wrap_hours(double h) {
  h = std::fmod(h, 24.0);
  return h < 0 ? h + 24 : h;
}

}  // namespace

DiurnalDemand::DiurnalDemand(DiurnalDemandConfig config) : config_(config), noise_(24 * 60 + 1) {
  std::mt19937_64 rng(config_.seed);
  std::normal_distribution<double> normal(0, 1);
  const double rho = config_.noise_correlation;
  double n = 0;
  for (double& v : noise_) {
    n = rho * n + std::sqrt(1 - rho * rho) * config_.noise * normal(rng);
    v = std::exp(n - config_.noise * config_.noise / 2);  // mean 1
  }
}

double DiurnalDemand::shape(double hour) const {
  const double rise = wrap_hours(config_.peak_hour_utc - config_.trough_hour_utc);  // trough -> peak
  const double since_trough = wrap_hours(hour - config_.trough_hour_utc);
  const double phase = since_trough <= rise ? since_trough / rise : 1 - (since_trough - rise) / (24 - rise);
  return (1 - std::cos(PI * phase)) / 2;
}

double DiurnalDemand::rate(double seconds) const {
  const double day_seconds = std::fmod(std::fmod(seconds, 86400.0) + 86400.0, 86400.0);
  const double base = config_.peak_rps * (config_.trough_fraction + (1 - config_.trough_fraction) * shape(day_seconds / 3600));
  const size_t minute = size_t(day_seconds / 60);
  const double frac = day_seconds / 60 - double(minute);
  const double noise = noise_[minute] * (1 - frac) + noise_[minute + 1] * frac;
  return base * noise;
}

}  // namespace qsync::lending_sim
