// File: planner/json_access.h
// Reading and writing optional members of already-validated JSON objects: an absent member
// reads as the type's zero, and an empty string is not written.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync {

inline std::string json_text(const nlohmann::json& o, const char* key) { return o.contains(key) ? o[key].get<std::string>() : ""; }
inline int64_t json_integer(const nlohmann::json& o, const char* key) { return o.contains(key) ? o[key].get<int64_t>() : 0; }
inline double json_number(const nlohmann::json& o, const char* key) { return o.contains(key) ? o[key].get<double>() : 0.0; }
inline bool json_flag(const nlohmann::json& o, const char* key, bool fallback = false) {
  return o.contains(key) ? o[key].get<bool>() : fallback;
}

inline void put_text(nlohmann::json& o, const char* key, const std::string& v) {
  if (!v.empty()) o[key] = v;
}

}  // namespace qsync
