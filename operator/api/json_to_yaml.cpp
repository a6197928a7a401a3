// File: operator/api/json_to_yaml.cpp
// The YAML emitter behind qsync-crd-gen.
#include "operator/api/json_to_yaml.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace qsync::api {
namespace {

using json = nlohmann::json;

// Plain (unquoted) only for strings that start with a letter, hold no YAML indicator (: # { } [ ]
// & * ! | > ' " % @ `) except a mid-word apostrophe, do not end in a space, and that no YAML
// version reads as a bool or null: "v1alpha1", "apiextensions.k8s.io/v1", "The job's phase."
bool plain_safe(const std::string& s) {
  static const std::regex plain(R"(^[A-Za-z][A-Za-z0-9_./,()' -]*$)");
  if (!std::regex_match(s, plain) || s.back() == ' ') return false;
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"})
    if (lower == word) return false;
  return true;
}

std::string scalar(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return plain_safe(s) ? s : v.dump();
  }
  if (v.is_object()) return "{}";  // only called for empty containers
  if (v.is_array()) return "[]";
  return v.dump();  // numbers, booleans, null
}

bool is_block(const json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

void emit(const json& v, int indent, std::string& out);

// One "key: value" entry of a mapping, the key already indented.
void emit_entry(const std::string& key, const json& v, int indent, std::string& out) {
  out.append(scalar(json(key))).append(":");
  if (!is_block(v)) {
    out.append(" ").append(scalar(v)).append("\n");
    return;
  }
  out += "\n";
  emit(v, v.is_array() ? indent : indent + 2, out);
}

void emit(const json& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [key, child] : v.items()) {
      out += pad;
      emit_entry(key, child, indent, out);
    }
    return;
  }
  for (const json& item : v) {
    out.append(pad).append("-");
    if (!is_block(item)) {
      out.append(" ").append(scalar(item)).append("\n");
    } else if (item.is_object()) {
      // The first entry shares the dash's line; the rest align under it.
      bool first = true;
      for (const auto& [key, child] : item.items()) {
        if (first) out.append(" ");
        else out.append(pad).append("  ");
        first = false;
        emit_entry(key, child, indent + 2, out);
      }
    } else {
      out += "\n";
      emit(item, indent + 2, out);
    }
  }
}

}  // namespace

std::string json_to_yaml(const json& value) {
  if (!is_block(value)) return scalar(value).append("\n");
  std::string out;
  emit(value, 0, out);
  return out;
}

}  // namespace qsync::api
