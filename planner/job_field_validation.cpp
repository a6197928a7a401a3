// File: planner/job_field_validation.cpp
// Walks a JSON value alongside the field table: table paths use "x[]" for array items, value
// paths use "x[3]", so messages point at the element that is wrong.
#include "planner/job_field_validation.h"

#include <map>
#include <regex>
#include <sstream>

namespace qsync {
namespace {

using json = nlohmann::json;

// The table indexed by parent path: "spec.optimizer" -> its fields.
class FieldIndex {
 public:
  explicit FieldIndex(const std::vector<Field>& fields) {
    for (const Field& f : fields) {
      const size_t dot = f.path.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : f.path.substr(0, dot);
      children_[parent].push_back(&f);
    }
  }

  const std::vector<const Field*>& children(const std::string& parent) const {
    static const std::vector<const Field*> none;
    const auto it = children_.find(parent);
    return it == children_.end() ? none : it->second;
  }

  const Field* child(const std::string& parent, const std::string& name) const {
    for (const Field* f : children(parent))
      if (f->path == parent + "." + name) return f;
    return nullptr;
  }

 private:
  std::map<std::string, std::vector<const Field*>> children_;
};

std::string last_segment(const std::string& path) { return path.substr(path.rfind('.') + 1); }

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string type_words(FieldType type) {
  switch (type) {
    case FieldType::STRING: return "a string";
    case FieldType::INTEGER: return "an integer";
    case FieldType::NUMBER: return "a number";
    case FieldType::BOOLEAN: return "true or false";
    case FieldType::DATE_TIME: return "an RFC 3339 time such as 2025-01-31T12:00:00Z";
    case FieldType::OBJECT: return "a mapping";
    case FieldType::ARRAY: return "a list of mappings";
    case FieldType::STRING_MAP: return "a mapping of strings";
    case FieldType::QUANTITY_MAP: return "a mapping of quantities";
  }
  return "?";
}

bool has_type(FieldType type, const json& v) {
  switch (type) {
    case FieldType::STRING:
    case FieldType::DATE_TIME: return v.is_string();
    case FieldType::INTEGER: return v.is_number_integer();
    case FieldType::NUMBER: return v.is_number();
    case FieldType::BOOLEAN: return v.is_boolean();
    case FieldType::OBJECT:
    case FieldType::STRING_MAP:
    case FieldType::QUANTITY_MAP: return v.is_object();
    case FieldType::ARRAY: return v.is_array();
  }
  return false;
}

class Checker {
 public:
  explicit Checker(const FieldIndex& index) : index_(index) {}
  std::vector<std::string> problems;

  // `open`: keys the table does not list are kept (an open object's Kubernetes fields).
  void check_object(const json& value, const std::string& table_path, const std::string& value_path, bool open = false) {
    for (const auto& [key, child] : value.items()) {
      const Field* f = index_.child(table_path, key);
      if (!f && open) continue;
      if (!f) {
        std::string known;
        for (const Field* k : index_.children(table_path)) known += (known.empty() ? "" : ", ") + last_segment(k->path);
        problems.push_back("unknown field \"" + key + "\" in " + value_path + " (known: " + known + ")");
        continue;
      }
      check_value(*f, child, value_path + "." + key);
    }
    for (const Field* f : index_.children(table_path))
      if (f->required && !value.contains(last_segment(f->path)))
        problems.push_back(value_path + "." + last_segment(f->path) + " is missing: " + f->description);
  }

 private:
  const FieldIndex& index_;

  void check_value(const Field& f, const json& v, const std::string& at) {
    if (!has_type(f.type, v)) {
      problems.push_back(at + " must be " + type_words(f.type) + ", got " + v.dump());
      return;
    }
    if (!f.allowed.empty() && v.is_string()) {
      bool found = false;
      std::string list;
      for (const std::string& a : f.allowed) {
        found = found || v.get<std::string>() == a;
        list += (list.empty() ? "" : ", ") + a;
      }
      if (!found) problems.push_back(at + ": " + v.dump() + " is not one of " + list);
    }
    if (f.minimum && v.is_number()) {
      const double x = v.get<double>();
      if (f.exclusive_minimum && !(x > *f.minimum))
        problems.push_back(at + " must be greater than " + number_text(*f.minimum) + ", got " + v.dump());
      if (!f.exclusive_minimum && x < *f.minimum)
        problems.push_back(at + " must be at least " + number_text(*f.minimum) + ", got " + v.dump());
    }
    if (v.is_string()) check_string(f, v.get<std::string>(), at);
    if (f.type == FieldType::OBJECT) check_object(v, f.path, at, f.open_object);
    if (f.type == FieldType::ARRAY)
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string item_at = at + "[" + std::to_string(i) + "]";
        if (!v[i].is_object()) problems.push_back(item_at + " must be a mapping, got " + v[i].dump());
        else check_object(v[i], f.path + "[]", item_at, f.open_object);
      }
    if (f.type == FieldType::STRING_MAP)
      for (const auto& [key, item] : v.items())
        if (!item.is_string()) problems.push_back(at + "." + key + " must be a string, got " + item.dump() + " (quote it)");
    if (f.type == FieldType::QUANTITY_MAP)
      for (const auto& [key, item] : v.items()) {
        static const std::regex quantity(QUANTITY_PATTERN, std::regex::ECMAScript);
        const bool ok = item.is_number_integer() || (item.is_string() && std::regex_search(item.get<std::string>(), quantity));
        if (!ok) problems.push_back(at + "." + key + ": " + item.dump() + " is not a quantity such as 4, 500m or 16Gi");
      }
  }

  void check_string(const Field& f, const std::string& s, const std::string& at) {
    if (f.min_length && static_cast<int64_t>(s.size()) < *f.min_length)
      problems.push_back(at + " must not be empty (leave it out instead)");
    if (!f.pattern.empty() && !s.empty() && !std::regex_search(s, std::regex(f.pattern, std::regex::ECMAScript)))
      problems.push_back(at + ": " + json(s).dump() + " is not " + f.format_hint);
    if (f.type == FieldType::DATE_TIME) {
      static const std::regex time(R"(^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$)");
      if (!std::regex_match(s, time)) problems.push_back(at + ": " + json(s).dump() + " is not " + type_words(f.type));
    }
  }
};

void fill_defaults(const FieldIndex& index, const std::string& table_path, json& value) {
  if (!value.is_object()) return;
  for (const Field* f : index.children(table_path)) {
    const std::string key = last_segment(f->path);
    if (!value.contains(key) && !f->default_value.is_null()) value[key] = f->default_value;
    if (!value.contains(key)) continue;
    json& child = value[key];
    if (f->type == FieldType::OBJECT) fill_defaults(index, f->path, child);
    if (f->type == FieldType::ARRAY && child.is_array())
      for (json& item : child) fill_defaults(index, f->path + "[]", item);
  }
}

}  // namespace

void apply_field_defaults(const std::vector<Field>& fields, const std::string& root, json& value) {
  fill_defaults(FieldIndex(fields), root, value);
}

std::vector<std::string> field_problems(const std::vector<Field>& fields, const std::string& root, const json& value) {
  const FieldIndex index(fields);
  Checker checker(index);
  if (!value.is_object()) return {root + " must be a mapping, got " + value.dump()};
  checker.check_object(value, root, root);
  return checker.problems;
}

}  // namespace qsync
