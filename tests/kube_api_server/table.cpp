// File: tests/kube_api_server/table.cpp
// Table rendering as apiextensions-apiserver's tableconvertor does it for custom resources
// (columns Name + additionalPrinterColumns, "Age" from metadata.creationTimestamp when a version
// has none; cells typed by the column's type, null when the path is absent), the JSONPath subset
// CRD printer columns allow, and kubectl's HumanDuration.
#include "tests/kube_api_server/table.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>
#include <stdexcept>

namespace qsync::kube_test {
namespace {

const char* const kNameDescription =
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a "
    "client to request the generation of an appropriate name automatically. Name is primarily intended for creation "
    "idempotence and configuration definition. Cannot be updated.";
const char* const kCreationTimestampDescription =
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed "
    "to be set in happens-before order across separate operations. Clients may not set this value. It is represented "
    "in RFC3339 form and is in UTC.";

// Seconds since the epoch of an RFC 3339 timestamp ("2024-05-01T12:00:00Z", "...00.5+02:00").
std::optional<double> parse_timestamp(const std::string& s) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &consumed) != 6 || consumed != 19)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double seconds = static_cast<double>(timegm(&tm));
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return std::nullopt;
    seconds += std::stod("0." + s.substr(start, i - start));
  }
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z') && i + 1 == s.size()) return seconds;
  int hours = 0, minutes = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-') && s.size() == i + 6 &&
      std::sscanf(s.c_str() + i + 1, "%2d:%2d", &hours, &minutes) == 2)
    return seconds - (s[i] == '+' ? 1 : -1) * (hours * 3600.0 + minutes * 60.0);
  return std::nullopt;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ConvertToHumanReadableDateType: "<unknown>" for no time, else the age.
json age_cell(const json& timestamp) {
  if (!timestamp.is_string()) return nullptr;
  const std::optional<double> t = parse_timestamp(timestamp.get<std::string>());
  if (!t) return "<invalid>";
  return kube_age(now_seconds() - *t);
}

// cellForJSONValue, plus the string case's jsonpath printing (non-strings as JSON).
json cell_for(const std::string& type, const json& value) {
  if (value.is_null()) return nullptr;
  if (type == "integer" && value.is_number()) return value.is_number_integer() ? value : json(static_cast<int64_t>(value.get<double>()));
  if (type == "number" && value.is_number()) return value.get<double>();
  if (type == "boolean" && value.is_boolean()) return value;
  if (type == "string") return value.is_string() ? value : json(value.dump());
  if (type == "date") return age_cell(value);
  return nullptr;
}

}  // namespace

std::string kube_age(double seconds_since) {
  const int64_t seconds = static_cast<int64_t>(std::trunc(seconds_since));
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return std::to_string(seconds) + "s";
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return std::to_string(minutes) + "m" + (s == 0 ? "" : std::to_string(s) + "s");
  }
  if (minutes < 60 * 3) return std::to_string(minutes) + "m";
  const int64_t hours = seconds / 3600;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return std::to_string(hours) + "h" + (m == 0 ? "" : std::to_string(m) + "m");
  }
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return std::to_string(hours / 24) + "d" + (h == 0 ? "" : std::to_string(h) + "h");
  }
  if (hours < 24 * 365 * 2) return std::to_string(hours / 24) + "d";
  if (hours < 24 * 365 * 8) {
    const int64_t d = (hours / 24) % 365;
    return std::to_string(hours / 24 / 365) + "y" + (d == 0 ? "" : std::to_string(d) + "d");
  }
  return std::to_string(hours / 24 / 365) + "y";
}

json json_path_get(const json& object, const std::string& path_in) {
  std::string path = path_in;
  auto bad = [&](const std::string& why) -> std::invalid_argument {
    return std::invalid_argument("JSONPath \"" + path_in + "\": " + why);
  };
  if (path.size() >= 2 && path.front() == '{' && path.back() == '}') path = path.substr(1, path.size() - 2);
  if (!path.empty() && path[0] == '$') path.erase(0, 1);
  const json* at = &object;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      std::string name;
      for (++i; i < path.size() && path[i] != '.' && path[i] != '['; ++i) {
        if (path[i] == '\\' && i + 1 < path.size()) ++i;  // `\.` keeps a dot in a key
        name += path[i];
      }
      if (name.empty()) {
        if (i == path.size()) break;  // "." alone: the object itself
        throw bad("empty field name at offset " + std::to_string(i));
      }
      if (!at->is_object() || !at->contains(name)) return nullptr;
      at = &(*at)[name];
    } else if (path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string::npos) throw bad("'[' without ']'");
      const std::string inside = path.substr(i + 1, close - i - 1);
      i = close + 1;
      if (inside.size() >= 2 && (inside[0] == '\'' || inside[0] == '"') && inside.back() == inside[0]) {
        const std::string name = inside.substr(1, inside.size() - 2);
        if (!at->is_object() || !at->contains(name)) return nullptr;
        at = &(*at)[name];
        continue;
      }
      size_t used = 0;
      long long index = 0;
      try {
        index = std::stoll(inside, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (inside.empty() || used != inside.size()) throw bad("[" + inside + "] is not an index or a quoted key");
      if (!at->is_array()) return nullptr;
      const long long size = static_cast<long long>(at->size());
      if (index < 0) index += size;  // [-1] is the last item
      if (index < 0 || index >= size) return nullptr;
      at = &(*at)[static_cast<size_t>(index)];
    } else {
      throw bad("expected '.' or '[' at offset " + std::to_string(i));
    }
  }
  return *at;
}

json table_for(const std::vector<json>& objects, const json& printer_columns, const std::string& include_object) {
  if (include_object != "" && include_object != "None" && include_object != "Metadata" && include_object != "Object")
    throw std::invalid_argument("includeObject \"" + include_object + "\" is not one of None, Metadata, Object");
  json columns = printer_columns.is_array() ? printer_columns : json::array();
  if (columns.empty())
    columns.push_back({{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"},
                       {"description", kCreationTimestampDescription}});
  json definitions = json::array();
  definitions.push_back({{"name", "Name"}, {"type", "string"}, {"format", "name"}, {"description", kNameDescription}, {"priority", 0}});
  for (const json& c : columns) {
    const std::string json_path = c.value("jsonPath", "");
    std::string description = c.value("description", "");
    if (description.empty()) description = "Custom resource definition column (in JSONPath format): " + json_path;
    definitions.push_back({{"name", c.value("name", "")}, {"type", c.value("type", "string")}, {"format", c.value("format", "")},
                           {"description", description}, {"priority", c.value("priority", 0)}});
  }
  json rows = json::array();
  for (const json& object : objects) {
    const json metadata = object.is_object() ? object.value("metadata", json::object()) : json::object();
    json cells = json::array({metadata.value("name", "")});
    for (const json& c : columns) {
      json value;
      try {
        value = json_path_get(object, c.value("jsonPath", ""));
      } catch (const std::invalid_argument&) {
        value = nullptr;  // a path the CRD should not have accepted: an empty cell, as the server shows
      }
      cells.push_back(cell_for(c.value("type", "string"), value));
    }
    json row = {{"cells", std::move(cells)}};
    if (include_object == "Object") row["object"] = object;
    else if (include_object != "None")
      row["object"] = {{"kind", "PartialObjectMetadata"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", metadata}};
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", json::object()},
          {"columnDefinitions", std::move(definitions)}, {"rows", std::move(rows)}};
}

}  // namespace qsync::kube_test
