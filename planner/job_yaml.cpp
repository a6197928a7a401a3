// File: planner/job_yaml.cpp
// A job file's YAML read as JSON (job_yaml_to_json, planner/job_spec.h): the bytes checked for
// UTF-8 first, then YAML 1.2 core-schema scalars, so the one JSON parser reads files and API
// server objects alike.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <regex>
#include <stdexcept>

#include "planner/job_spec.h"

namespace qsync {
namespace {

using json = nlohmann::json;

// The offset of the first byte that does not belong to well-formed UTF-8 (npos: none).
size_t first_invalid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned b = p[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// YAML 1.2 core schema scalars: what a plain (unquoted) scalar reads as.
json yaml_scalar(const YAML::Node& n) {
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted: a string
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  // Decimal integers and floats only (no hex, inf or nan: no job field takes them).
  static const std::regex integer(R"(^[-+]?[0-9]+$)");
  static const std::regex decimal(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  try {
    if (std::regex_match(v, integer)) return int64_t(std::stoll(v));
    if (std::regex_match(v, decimal)) return std::stod(v);
  } catch (const std::out_of_range&) {
    return v;  // too large for a number: a string, which the field check refuses by name
  }
  return v;
}

// A scalar (a map key too) as yaml-cpp read it must be UTF-8 as well: the file's bytes are checked
// before parsing, but yaml-cpp can read a scalar holding a NUL byte into bytes that are not.
void require_utf8_scalar(const YAML::Node& n, const std::string& s) {
  if (first_invalid_utf8(s) != std::string::npos)
    throw std::invalid_argument("a value at line " + std::to_string(n.Mark().line + 1) +
                                " is not valid UTF-8 as YAML reads it: remove the control characters (NUL) there");
}

json yaml_node_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return nullptr;
    case YAML::NodeType::Scalar: require_utf8_scalar(n, n.Scalar()); return yaml_scalar(n);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : n) out.push_back(yaml_node_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) {
        const std::string key = kv.first.as<std::string>();
        require_utf8_scalar(kv.first, key);
        out[key] = yaml_node_to_json(kv.second);
      }
      return out;
    }
    case YAML::NodeType::Undefined: break;
  }
  return nullptr;
}

}  // namespace

json job_yaml_to_json(const std::string& text) {
  // yaml-cpp passes any bytes through; JSON strings must be UTF-8 (nlohmann's dump of an error
  // message quoting such a value would throw instead of naming the field).
  if (const size_t bad = first_invalid_utf8(text); bad != std::string::npos) {
    const size_t line = size_t(std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n')) + 1;
    throw std::invalid_argument("not valid UTF-8 at line " + std::to_string(line) + " (byte " + std::to_string(bad) +
                                "): save the file as UTF-8");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("malformed YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  return yaml_node_to_json(root);
}

}  // namespace qsync
