// File: operator/api/json_to_yaml.h
// JSON -> block-style YAML, deterministic and plain: keys in the JSON object's order, lists as
// "- " items at their key's indentation (the kubectl / controller-gen layout), strings unquoted
// only when YAML cannot read them as anything but that string, otherwise double-quoted with
// JSON escapes (which YAML's double-quoted style shares). Reading the output with any YAML 1.1 or
// 1.2 parser gives back the same JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace qsync::api {

std::string json_to_yaml(const nlohmann::json& value);

}  // namespace qsync::api
