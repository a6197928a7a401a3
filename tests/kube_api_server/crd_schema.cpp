// File: tests/kube_api_server/crd_schema.cpp
// CRD reading, and the three passes over a structural openAPIV3Schema that
// k8s.io/apiextensions-apiserver applies to custom objects: pruning (pkg/apiserver/schema/
// pruning), defaulting (pkg/apiserver/schema/defaulting) and validation (kube-openapi's
// validator, its messages converted to field errors "PATH: Invalid value: VALUE: DETAIL").
#include "tests/kube_api_server/crd_schema.h"

#include <algorithm>
#include <regex>
#include <set>
#include <stdexcept>

namespace qsync::kube_test {
namespace {

// ---- reading a CRD ----

// `what` is a field error in the API server's form, "spec.group: Required value", so that the
// server can return it as a cause of its 422 Invalid.
[[noreturn]] void bad_crd(const std::string& what) { throw std::invalid_argument(what); }

std::string required_string(const json& object, const std::string& name, const std::string& path) {
  if (!object.is_object() || !object.contains(name)) bad_crd(path + ": Required value");
  if (!object[name].is_string() || object[name].get<std::string>().empty())
    bad_crd(path + ": Invalid value: " + object[name].dump() + ": must be a non-empty string");
  return object[name].get<std::string>();
}

std::string optional_string(const json& object, const std::string& name, const std::string& path, const std::string& fallback) {
  if (!object.contains(name) || object[name].is_null()) return fallback;
  return required_string(object, name, path);
}

std::vector<std::string> string_list(const json& object, const std::string& name, const std::string& path) {
  std::vector<std::string> out;
  if (!object.contains(name) || object[name].is_null()) return out;
  if (!object[name].is_array()) bad_crd(path + ": Invalid value: " + object[name].dump() + ": must be a list of strings");
  for (const json& s : object[name]) {
    if (!s.is_string()) bad_crd(path + ": Invalid value: " + object[name].dump() + ": must be a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

bool optional_bool(const json& object, const std::string& name, const std::string& path, bool fallback) {
  if (!object.contains(name) || object[name].is_null()) return fallback;
  if (!object[name].is_boolean()) bad_crd(path + ": Invalid value: " + object[name].dump() + ": must be true or false");
  return object[name].get<bool>();
}

bool is_lower_dns_label(const std::string& s) {
  return !s.empty() && s.size() <= 63 && std::isalpha(static_cast<unsigned char>(s.front())) &&
         std::isalnum(static_cast<unsigned char>(s.back())) &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

CrdVersion version_from_json(const json& v, const std::string& path) {
  if (!v.is_object()) bad_crd(path + ": Invalid value: " + v.dump() + ": must be an object");
  CrdVersion out;
  out.name = required_string(v, "name", path + ".name");
  if (!is_lower_dns_label(out.name)) bad_crd(path + ".name: Invalid value: \"" + out.name + "\": must be a lower-case DNS label such as v1alpha1");
  out.served = optional_bool(v, "served", path + ".served", true);
  out.storage = optional_bool(v, "storage", path + ".storage", false);
  if (v.contains("schema") && v["schema"].is_object() && v["schema"].contains("openAPIV3Schema")) {
    out.schema = v["schema"]["openAPIV3Schema"];
    if (!out.schema.is_object()) bad_crd(path + ".schema.openAPIV3Schema: Invalid value: " + out.schema.dump() + ": must be an object");
  }
  if (v.contains("subresources") && v["subresources"].is_object())
    out.status_subresource = v["subresources"].contains("status") && !v["subresources"]["status"].is_null();
  if (v.contains("additionalPrinterColumns") && !v["additionalPrinterColumns"].is_null()) {
    const json& columns = v["additionalPrinterColumns"];
    if (!columns.is_array()) bad_crd(path + ".additionalPrinterColumns: Invalid value: " + columns.dump() + ": must be a list");
    for (size_t i = 0; i < columns.size(); ++i) {
      const std::string at = path + ".additionalPrinterColumns[" + std::to_string(i) + "]";
      required_string(columns[i], "name", at + ".name");
      const std::string type = required_string(columns[i], "type", at + ".type");
      static const std::set<std::string> kTypes = {"integer", "number", "string", "boolean", "date"};
      if (!kTypes.count(type))
        bad_crd(at + ".type: Unsupported value: \"" + type +
                "\": supported values: \"boolean\", \"date\", \"integer\", \"number\", \"string\"");
      const std::string json_path = required_string(columns[i], "jsonPath", at + ".jsonPath");
      if (json_path[0] != '.') bad_crd(at + ".jsonPath: Invalid value: \"" + json_path + "\": must be a simple JSON path starting with '.'");
    }
    out.printer_columns = columns;
  }
  return out;
}

// ---- validation ----

std::string type_name_of(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();  // "null", "boolean", "string", "array", "object"
}

bool has_type(const json& v, const std::string& type) {
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return true;  // unknown types are not the validator's business
}

size_t utf8_length(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool is_meta_field(const std::string& k) { return k == "apiVersion" || k == "kind" || k == "metadata"; }

// A boolean keyword: true only when present and true.
bool flag(const json& s, const char* name) { return s.is_object() && s.contains(name) && s[name].is_boolean() && s[name].get<bool>(); }

std::string child_path(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }

class Validator {
 public:
  std::vector<std::string> errors;

  void check(const json& s, const json& v, const std::string& path, bool root, bool type_only) {
    if (!s.is_object()) return;
    const std::string where = path.empty() ? "<root>" : path;
    const bool int_or_string = flag(s, "x-kubernetes-int-or-string");
    const std::string type = s.contains("type") && s["type"].is_string() ? s["type"].get<std::string>() : "";
    if (v.is_null() && flag(s, "nullable")) return;
    if (int_or_string ? !(v.is_number_integer() || v.is_string()) : (!type.empty() && !has_type(v, type))) {
      const std::string got = type_name_of(v);
      invalid(where, "\"" + got + "\"", "must be of type " + (int_or_string ? std::string("integer,string") : type) + ": \"" + got + "\"");
      return;
    }
    if (type_only) return;
    if (s.contains("enum") && s["enum"].is_array() && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) {
      std::string supported;
      for (const json& e : s["enum"]) supported += (supported.empty() ? "" : ", ") + e.dump();
      errors.push_back(where + ": Unsupported value: " + v.dump() + ": supported values: " + supported);
    }
    if (v.is_number()) check_number(s, v, where);
    if (v.is_string()) check_string(s, v.get<std::string>(), where);
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
        invalid(where, std::to_string(v.size()), "should have at least " + s["minItems"].dump() + " items");
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
        invalid(where, std::to_string(v.size()), "should have at most " + s["maxItems"].dump() + " items");
      if (s.contains("items"))
        for (size_t i = 0; i < v.size(); ++i) check(s["items"], v[i], path + "[" + std::to_string(i) + "]", false, false);
    }
    if (v.is_object()) check_object(s, v, path, root);
  }

 private:
  void invalid(const std::string& where, const std::string& value, const std::string& detail) {
    errors.push_back(where + ": Invalid value: " + value + ": " + where + " in body " + detail);
  }

  void check_number(const json& s, const json& v, const std::string& where) {
    const double x = v.get<double>();
    if (s.contains("minimum") && s["minimum"].is_number()) {
      const double m = s["minimum"].get<double>();
      if (flag(s, "exclusiveMinimum") ? x <= m : x < m)
        invalid(where, v.dump(), std::string("should be greater than ") + (flag(s, "exclusiveMinimum") ? "" : "or equal to ") + s["minimum"].dump());
    }
    if (s.contains("maximum") && s["maximum"].is_number()) {
      const double m = s["maximum"].get<double>();
      if (flag(s, "exclusiveMaximum") ? x >= m : x > m)
        invalid(where, v.dump(), std::string("should be less than ") + (flag(s, "exclusiveMaximum") ? "" : "or equal to ") + s["maximum"].dump());
    }
  }

  void check_string(const json& s, const std::string& v, const std::string& where) {
    const std::string shown = json(v).dump();
    if (s.contains("minLength") && utf8_length(v) < s["minLength"].get<size_t>())
      invalid(where, shown, "should be at least " + s["minLength"].dump() + " chars long");
    if (s.contains("maxLength") && utf8_length(v) > s["maxLength"].get<size_t>())
      invalid(where, shown, "should be at most " + s["maxLength"].dump() + " chars long");
    if (s.contains("pattern") && s["pattern"].is_string()) {
      const std::string pattern = s["pattern"].get<std::string>();
      try {
        if (!std::regex_search(v, std::regex(pattern, std::regex::ECMAScript))) invalid(where, shown, "should match '" + pattern + "'");
      } catch (const std::regex_error&) {
        errors.push_back(where + ": Invalid value: " + shown + ": the schema's pattern '" + pattern + "' is not a valid regular expression");
      }
    }
    if (s.contains("format") && s["format"] == "date-time") {
      static const std::regex kDateTime(R"(^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$)");
      if (!std::regex_match(v, kDateTime)) invalid(where, shown, "must be of type date-time: " + shown);
    }
  }

  void check_object(const json& s, const json& v, const std::string& path, bool root) {
    if (s.contains("required") && s["required"].is_array())
      for (const json& name : s["required"]) {
        if (!name.is_string() || (root && is_meta_field(name.get<std::string>()))) continue;
        if (!v.contains(name.get<std::string>())) errors.push_back(child_path(path, name.get<std::string>()) + ": Required value");
      }
    if (flag(s, "x-kubernetes-embedded-resource") && !root)
      for (const char* f : {"apiVersion", "kind"})
        if (!v.contains(f) || v[f] == "") errors.push_back(child_path(path, f) + ": Required value: must not be empty");
    const json properties = s.value("properties", json::object());
    const json additional = s.value("additionalProperties", json());
    for (const auto& [k, child] : v.items()) {
      const std::string at = child_path(path, k);
      if (properties.contains(k)) {
        check(properties[k], child, at, false, root && is_meta_field(k));
      } else if (additional.is_object()) {
        check(additional, child, at, false, false);
      } else if (additional == false && !(root && is_meta_field(k))) {
        invalid(at, child.dump(), "is a forbidden property");
      }
    }
  }
};

// ---- defaulting and pruning ----

void prune(const json& s, json& v, bool root) {
  if (!s.is_object() || s.empty()) return;
  if (v.is_array() && s.contains("items")) {
    for (json& item : v) prune(s["items"], item, false);
    return;
  }
  if (!v.is_object()) return;
  const bool keep_meta = root || flag(s, "x-kubernetes-embedded-resource");
  const bool preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
  const json properties = s.value("properties", json::object());
  const json additional = s.value("additionalProperties", json());
  std::vector<std::string> drop;
  for (auto& [k, child] : v.items()) {
    if (keep_meta && is_meta_field(k)) continue;  // the server owns metadata's shape
    if (properties.contains(k)) prune(properties[k], child, false);
    else if (additional.is_object()) prune(additional, child, false);
    else if (additional != true && !preserve) drop.push_back(k);
  }
  for (const std::string& k : drop) v.erase(k);
}

}  // namespace

const CrdVersion* CrdInfo::version(const std::string& v) const {
  for (const CrdVersion& version : versions)
    if (version.name == v) return &version;
  return nullptr;
}

CrdInfo crd_info_from_json(const json& crd) {
  if (!crd.is_object()) bad_crd("<root>: Invalid value: \"" + std::string(crd.type_name()) + "\": a CustomResourceDefinition must be an object");
  if (crd.contains("apiVersion") && crd["apiVersion"] != "apiextensions.k8s.io/v1")
    bad_crd("apiVersion: Unsupported value: " + crd["apiVersion"].dump() + ": supported values: \"apiextensions.k8s.io/v1\"");
  if (crd.contains("kind") && crd["kind"] != "CustomResourceDefinition")
    bad_crd("kind: Unsupported value: " + crd["kind"].dump() + ": supported values: \"CustomResourceDefinition\"");
  CrdInfo info;
  info.name = required_string(crd.value("metadata", json::object()), "name", "metadata.name");
  if (!crd.contains("spec") || !crd["spec"].is_object()) bad_crd("spec: Required value");
  const json& spec = crd["spec"];
  info.group = required_string(spec, "group", "spec.group");
  if (!spec.contains("names") || !spec["names"].is_object()) bad_crd("spec.names: Required value");
  const json& names = spec["names"];
  info.plural = required_string(names, "plural", "spec.names.plural");
  if (!is_lower_dns_label(info.plural)) bad_crd("spec.names.plural: Invalid value: \"" + info.plural + "\": must be a lower-case DNS label");
  info.kind = required_string(names, "kind", "spec.names.kind");
  info.list_kind = optional_string(names, "listKind", "spec.names.listKind", info.kind + "List");
  std::string lower = info.kind;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  info.singular = optional_string(names, "singular", "spec.names.singular", lower);
  info.short_names = string_list(names, "shortNames", "spec.names.shortNames");
  info.categories = string_list(names, "categories", "spec.names.categories");
  if (info.name != info.plural + "." + info.group)
    bad_crd("metadata.name: Invalid value: \"" + info.name + "\": must be spec.names.plural+\".\"+spec.group: \"" + info.plural +
            "." + info.group + "\"");
  const std::string scope = required_string(spec, "scope", "spec.scope");
  if (scope != "Namespaced" && scope != "Cluster")
    bad_crd("spec.scope: Unsupported value: \"" + scope + "\": supported values: \"Cluster\", \"Namespaced\"");
  info.namespaced = scope == "Namespaced";
  if (!spec.contains("versions") || !spec["versions"].is_array() || spec["versions"].empty())
    bad_crd("spec.versions: Required value: list at least one version");
  int storage = 0;
  for (size_t i = 0; i < spec["versions"].size(); ++i) {
    CrdVersion v = version_from_json(spec["versions"][i], "spec.versions[" + std::to_string(i) + "]");
    if (info.version(v.name) != nullptr) bad_crd("spec.versions[" + std::to_string(i) + "].name: Duplicate value: \"" + v.name + "\"");
    storage += v.storage ? 1 : 0;
    info.versions.push_back(std::move(v));
  }
  if (storage != 1)
    bad_crd("spec.versions: Invalid value: " + std::to_string(storage) +
            " storage versions: must have exactly one version marked as storage version");
  return info;
}

std::vector<std::string> schema_validate(const json& schema, const json& value) {
  Validator validator;
  validator.check(schema, value, "", true, false);
  return validator.errors;
}

void schema_apply_defaults(const json& schema, json& value) {
  if (!schema.is_object()) return;
  if (value.is_array() && schema.contains("items")) {
    for (json& item : value) schema_apply_defaults(schema["items"], item);
    return;
  }
  if (!value.is_object()) return;
  const json properties = schema.value("properties", json::object());
  const json additional = schema.value("additionalProperties", json());
  for (const auto& [k, p] : properties.items()) {
    const bool absent = !value.contains(k) || (value[k].is_null() && !flag(p, "nullable"));
    if (p.is_object() && p.contains("default") && absent) value[k] = p["default"];
  }
  for (auto& [k, child] : value.items()) {
    if (properties.contains(k)) schema_apply_defaults(properties[k], child);
    else if (additional.is_object()) schema_apply_defaults(additional, child);
  }
}

void schema_prune_unknown(const json& schema, json& value) { prune(schema, value, true); }

}  // namespace qsync::kube_test
