// File: worker/layers/layer_seed.h
// Per-layer, per-step seeds for everything random in a step (dropout masks, stochastic rounding),
// derived from (run seed, step, layer name) so results do not depend on thread count, on the
// order layers run in, or on which rank computes them. Exact definition (do not change: masks
// and rounding of saved runs depend on it):
//   fnv1a64(s)     64-bit FNV-1a (offset 0xcbf29ce484222325, prime 0x100000001b3) over the bytes
//   splitmix64(z)  z += 0x9e3779b97f4a7c15, then the two xor-shift-multiply rounds of SplitMix64
//   layer_seed     splitmix64(splitmix64(splitmix64(seed) ^ uint64(step)) ^ fnv1a64(name))
// A counter-based stream from a key: element i draws splitmix64(key + i * 0x9e3779b97f4a7c15).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qsync {

inline constexpr uint64_t SPLITMIX64_GAMMA = 0x9e3779b97f4a7c15ULL;

constexpr uint64_t splitmix64(uint64_t z) {
  z += SPLITMIX64_GAMMA;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= uint64_t(uint8_t(c));
    h *= 0x100000001b3ULL;
  }
  return h;
}

inline uint64_t layer_seed(uint64_t seed, int64_t step, const std::string& layer_name) {
  return splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(step)) ^ fnv1a64(layer_name));
}

// The i-th draw of the counter-based stream keyed by `key` (a layer_seed).
constexpr uint64_t counter_hash(uint64_t key, uint64_t i) { return splitmix64(key + i * SPLITMIX64_GAMMA); }

// A uniform double in [0, 1) from the top 53 bits of a hash.
constexpr double hash_to_unit(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }

}  // namespace qsync
