// File: tests/kube_api_server/yaml_json.cpp
// YAML nodes to nlohmann::json with yaml-cpp: maps and sequences map across; a scalar is typed
// only when it was written plain (not quoted) and reads as null, a boolean, an integer or a
// floating-point number in YAML 1.2's core schema; YAML 1.1's yes/no/on/off stay strings.
#include "tests/kube_api_server/yaml_json.h"

#include <cstdlib>
#include <regex>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

namespace qsync::kube_test {
namespace {

using nlohmann::json;

json scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  static const std::regex integer(R"([-+]?(0|[1-9][0-9]*))");
  static const std::regex hex(R"(0x[0-9a-fA-F]+)");
  static const std::regex floating(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (std::regex_match(text, integer)) {
    errno = 0;
    long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == 0) return v;
  }
  if (std::regex_match(text, hex)) return std::strtoll(text.c_str(), nullptr, 16);
  if (std::regex_match(text, floating)) return std::strtod(text.c_str(), nullptr);
  return text;
}

json node_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(node_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = node_to_json(kv.second);
      return out;
    }
  }
  return nullptr;
}

}  // namespace

nlohmann::json yaml_to_json(const std::string& text) {
  try {
    return node_to_json(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("the body is not valid YAML: ") + e.what());
  }
}

std::vector<nlohmann::json> yaml_documents_to_json(const std::string& text) {
  std::vector<nlohmann::json> out;
  try {
    for (const auto& doc : YAML::LoadAll(text)) {
      if (doc.IsNull()) continue;
      out.push_back(node_to_json(doc));
    }
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("the text is not valid YAML: ") + e.what());
  }
  return out;
}

}  // namespace qsync::kube_test
