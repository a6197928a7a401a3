// File: tests/kube_api_server/json_patch.cpp
// Merge patch, JSON patch over RFC 6901 pointers, and server-side apply. Apply tracks
// ownership as sets of FieldsV1 paths ("f:spec", "k:{\"name\":\"c\"}", "." for a list item
// itself), the same strings metadata.managedFields stores, so reading and writing managedFields
// is a walk over nested objects.
#include "tests/kube_api_server/json_patch.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <vector>

namespace qsync::kube_test {
namespace {

// ---- RFC 6901 pointers and RFC 6902 operations ----

std::vector<std::string> parse_pointer(const std::string& pointer) {
  if (pointer.empty()) return {};
  if (pointer[0] != '/') throw std::invalid_argument("path \"" + pointer + "\" must be empty or start with '/'");
  std::vector<std::string> tokens(1);
  for (size_t i = 1; i < pointer.size(); ++i) {
    const char c = pointer[i];
    if (c == '/') {
      tokens.emplace_back();
    } else if (c == '~') {
      const char next = i + 1 < pointer.size() ? pointer[i + 1] : '\0';
      if (next != '0' && next != '1') throw std::invalid_argument("path \"" + pointer + "\" has '~' not followed by 0 or 1");
      tokens.back() += next == '0' ? '~' : '/';
      ++i;
    } else {
      tokens.back() += c;
    }
  }
  return tokens;
}

// An array index token: "0" or [1-9][0-9]*, below `size` (or equal to it, or "-", when adding).
size_t array_index(const std::string& token, size_t size, bool adding) {
  if (adding && token == "-") return size;
  const bool digits = !token.empty() && std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || (token.size() > 1 && token[0] == '0') || token.size() > 18)
    throw std::invalid_argument("array index \"" + token + "\" is not a non-negative integer without leading zeros");
  const size_t index = std::stoull(token);
  if (index > size || (!adding && index == size))
    throw std::invalid_argument("array index " + token + " is out of range (size " + std::to_string(size) + ")");
  return index;
}

// The pointer to the first `count` tokens, escaped again ('~' as ~0, '/' as ~1).
std::string pointer_of(const std::vector<std::string>& tokens, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    out += '/';
    for (char c : tokens[i]) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  }
  return out;
}

json& resolve(json& doc, const std::vector<std::string>& tokens, size_t count) {
  json* at = &doc;
  for (size_t i = 0; i < count; ++i) {
    if (at->is_object() && at->contains(tokens[i])) {
      at = &(*at)[tokens[i]];
    } else if (at->is_array()) {
      at = &(*at)[array_index(tokens[i], at->size(), false)];
    } else {
      throw std::invalid_argument("path " + pointer_of(tokens, i + 1) + " does not exist");
    }
  }
  return *at;
}

void add_at(json& doc, const std::vector<std::string>& tokens, json value) {
  if (tokens.empty()) {
    doc = std::move(value);
    return;
  }
  json& parent = resolve(doc, tokens, tokens.size() - 1);
  if (parent.is_object()) {
    parent[tokens.back()] = std::move(value);
  } else if (parent.is_array()) {
    const size_t index = array_index(tokens.back(), parent.size(), true);
    parent.insert(parent.begin() + static_cast<std::ptrdiff_t>(index), std::move(value));
  } else {
    throw std::invalid_argument("parent " + pointer_of(tokens, tokens.size() - 1) + " is not an object or array");
  }
}

void remove_at(json& doc, const std::vector<std::string>& tokens) {
  if (tokens.empty()) throw std::invalid_argument("cannot remove the whole document");
  json& parent = resolve(doc, tokens, tokens.size() - 1);
  if (parent.is_object() && parent.contains(tokens.back())) {
    parent.erase(tokens.back());
  } else if (parent.is_array()) {
    parent.erase(parent.begin() + static_cast<std::ptrdiff_t>(array_index(tokens.back(), parent.size(), false)));
  } else {
    throw std::invalid_argument("path " + pointer_of(tokens, tokens.size()) + " does not exist");
  }
}

const json& member(const json& op, const char* name) {
  if (!op.contains(name)) throw std::invalid_argument(std::string("missing \"") + name + "\"");
  return op[name];
}

std::vector<std::string> pointer_member(const json& op, const char* name) {
  const json& p = member(op, name);
  if (!p.is_string()) throw std::invalid_argument(std::string("\"") + name + "\" must be a string");
  return parse_pointer(p.get<std::string>());
}

void apply_operation(json& doc, const json& op) {
  if (!op.is_object()) throw std::invalid_argument("an operation must be an object");
  const json& kind = member(op, "op");
  const std::string name = kind.is_string() ? kind.get<std::string>() : kind.dump();
  const std::vector<std::string> path = pointer_member(op, "path");
  if (name == "add") {
    add_at(doc, path, member(op, "value"));
  } else if (name == "remove") {
    remove_at(doc, path);
  } else if (name == "replace") {
    const json& value = member(op, "value");
    resolve(doc, path, path.size()) = value;
  } else if (name == "move" || name == "copy") {
    const std::vector<std::string> from = pointer_member(op, "from");
    if (name == "move" && from.size() < path.size() && std::equal(from.begin(), from.end(), path.begin()))
      throw std::invalid_argument("cannot move " + pointer_of(from, from.size()) + " into its own child");
    json value = resolve(doc, from, from.size());
    if (name == "move") remove_at(doc, from);
    add_at(doc, path, std::move(value));
  } else if (name == "test") {
    const json& expected = member(op, "value");
    const json& actual = resolve(doc, path, path.size());
    if (actual != expected) throw std::invalid_argument("test failed: value is " + actual.dump() + ", not " + expected.dump());
  } else {
    throw std::invalid_argument("unknown op \"" + name + "\" (want add, remove, replace, move, copy or test)");
  }
}

// ---- server-side apply ----

using FieldPath = std::vector<std::string>;
using FieldSet = std::set<FieldPath>;

// The merge key of a list of objects, or "" when the list is atomic.
std::string list_key_of(const std::string& field, const json& list) {
  if (!list.is_array() || list.empty()) return "";
  const std::string key = field == "conditions" ? "type" : "name";
  const bool keyed = std::all_of(list.begin(), list.end(), [&](const json& item) {
    return item.is_object() && item.contains(key) && (item[key].is_string() || item[key].is_number_integer());
  });
  return keyed ? key : "";
}

std::string item_element(const std::string& key, const json& item) { return "k:" + json{{key, item[key]}}.dump(); }

json without_nulls(const json& v) {
  if (!v.is_object()) return v;
  json out = json::object();
  for (const auto& [k, child] : v.items())
    if (!child.is_null()) out[k] = without_nulls(child);
  return out;
}

void collect_fields(const json& object, FieldPath& prefix, FieldSet& out) {
  for (const auto& [k, v] : object.items()) {
    prefix.push_back("f:" + k);
    const std::string key = list_key_of(k, v);
    if (v.is_object() && !v.empty()) {
      collect_fields(v, prefix, out);
    } else if (!key.empty()) {
      for (const json& item : v) {
        prefix.push_back(item_element(key, item));
        prefix.push_back(".");
        out.insert(prefix);
        prefix.pop_back();
        collect_fields(item, prefix, out);
        prefix.pop_back();
      }
    } else {
      out.insert(prefix);
    }
    prefix.pop_back();
  }
}

void fields_from_v1(const json& node, FieldPath& prefix, FieldSet& out) {
  for (const auto& [k, v] : node.items()) {
    prefix.push_back(k);
    if (v.is_object() && !v.empty()) fields_from_v1(v, prefix, out);
    else out.insert(prefix);
    prefix.pop_back();
  }
}

json fields_to_v1(const FieldSet& fields) {
  json root = json::object();
  for (const FieldPath& path : fields) {
    json* node = &root;
    for (const std::string& element : path) node = &(*node)[element];
    if (node->is_null()) *node = json::object();
  }
  return root;
}

// The value at the first `count` elements of `path` in `object`, or nullptr.
json* locate(json& object, const FieldPath& path, size_t count) {
  json* at = &object;
  for (size_t i = 0; i < count && at != nullptr; ++i) {
    const std::string& e = path[i];
    if (e == ".") continue;
    if (e.rfind("f:", 0) == 0) {
      at = at->is_object() && at->contains(e.substr(2)) ? &(*at)[e.substr(2)] : nullptr;
    } else if (e.rfind("k:", 0) == 0 && at->is_array()) {
      const json key = json::parse(e.substr(2));
      auto it = std::find_if(at->begin(), at->end(), [&](const json& item) {
        return item.is_object() && std::all_of(key.items().begin(), key.items().end(), [&](const auto& kv) {
          return item.contains(kv.key()) && item[kv.key()] == kv.value();
        });
      });
      at = it == at->end() ? nullptr : &*it;
    } else {
      at = nullptr;
    }
  }
  return at;
}

// ".spec.containers[name=\"c\"].image", as the API server names a field in a conflict.
std::string render_path(const FieldPath& path) {
  std::string out;
  for (const std::string& e : path) {
    if (e.rfind("f:", 0) == 0) out.append(".").append(e, 2);
    if (e.rfind("k:", 0) != 0) continue;
    std::string inside;
    const json key = json::parse(e.substr(2));
    for (const auto& [k, v] : key.items()) inside += (inside.empty() ? "" : ",") + k + "=" + v.dump();
    out += "[" + inside + "]";
  }
  return out;
}

// True when `fields` holds `base` or a path below it.
bool owns_at_or_below(const FieldSet& fields, const FieldPath& base) {
  auto it = fields.lower_bound(base);
  return it != fields.end() && it->size() >= base.size() && std::equal(base.begin(), base.end(), it->begin());
}

// True when `path` ends at the merge-key field of a list item ("k:{\"name\":\"c\"}", "f:name").
bool is_key_field(const FieldPath& path) {
  if (path.size() < 2 || path[path.size() - 2].rfind("k:", 0) != 0) return false;
  return json::parse(path[path.size() - 2].substr(2)).contains(path.back().substr(2));
}

void merge_applied(json& live, const json& applied, const std::string& field) {
  if (applied.is_object() && live.is_object()) {
    for (const auto& [k, v] : applied.items()) {
      if (live.contains(k)) merge_applied(live[k], v, k);
      else live[k] = v;
    }
    return;
  }
  const std::string key = list_key_of(field, applied);
  if (!key.empty() && list_key_of(field, live) == key) {
    for (const json& item : applied) {
      auto it = std::find_if(live.begin(), live.end(), [&](const json& l) { return l[key] == item[key]; });
      if (it != live.end()) merge_applied(*it, item, "");
      else live.push_back(item);
    }
    return;
  }
  live = applied;
}

void erase_at(json& object, const FieldPath& base) {
  json* parent = locate(object, base, base.size() - 1);
  json* target = locate(object, base, base.size());
  if (parent == nullptr || target == nullptr) return;
  if (parent->is_object()) parent->erase(base.back().substr(2));
  else if (parent->is_array()) parent->erase(parent->begin() + (target - &*parent->begin()));
}

std::string now_rfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

// One metadata.managedFields entry and the fields it holds.
struct Manager {
  json entry;
  FieldSet fields;
  bool is_applier = false;  // field_manager's own "Apply" entry
  bool changed = false;     // fields taken by a forced apply
};

// `applied` without nulls and without the fields the server owns: what the manager sets.
json apply_configuration(const json& applied) {
  json config = without_nulls(applied);
  config.erase("apiVersion");
  config.erase("kind");
  if (config.contains("metadata") && config["metadata"].is_object()) {
    for (const char* f : {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                          "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"})
      config["metadata"].erase(f);
    if (config["metadata"].empty()) config.erase("metadata");
  }
  return config;
}

// True when the apply sets `owned` (another manager's field), or a field above it, to a value
// other than the live one.
bool apply_changes(json& live, json& config, const FieldSet& applied_fields, const FieldPath& owned) {
  for (size_t n = 1; n <= owned.size(); ++n) {
    const FieldPath p(owned.begin(), owned.begin() + static_cast<std::ptrdiff_t>(n));
    if (p.back() == "." || !applied_fields.count(p)) continue;
    const json* now = locate(live, p, n);
    if (now != nullptr && *now != *locate(config, p, n)) return true;
  }
  return false;
}

// "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas", or for several
// "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .spec.a\n- .spec.b".
std::string conflict_message(const std::map<std::string, std::vector<std::string>>& conflicts, size_t count) {
  std::string msg = "Apply failed with " + std::to_string(count) + (count == 1 ? " conflict: " : " conflicts: ");
  if (count == 1) return msg + "conflict with " + conflicts.begin()->first + ": " + conflicts.begin()->second[0];
  for (const auto& [who, fields] : conflicts) {
    msg += (msg.back() == ' ' ? "" : "\n") + std::string("conflicts with ") + who + ":";
    for (const std::string& f : fields) msg += "\n- " + f;
  }
  return msg;
}

// Removes the fields in `previous` that no path in `kept` holds, whole list items first so that
// their key fields still find them, then the maps that leaves empty.
void remove_dropped_fields(json& result, const FieldSet& previous, const FieldSet& kept) {
  std::vector<FieldPath> removals(previous.rbegin(), previous.rend());  // deepest first
  std::stable_partition(removals.begin(), removals.end(), [](const FieldPath& p) { return p.back() == "."; });
  for (FieldPath base : removals) {
    if (base.back() == ".") base.pop_back();
    else if (is_key_field(base)) continue;  // an item someone still holds keeps its key
    if (base.empty() || owns_at_or_below(kept, base)) continue;
    erase_at(result, base);
    while (base.size() > 1) {
      base.pop_back();
      const json* parent = locate(result, base, base.size());
      if (base.back().rfind("f:", 0) != 0 || parent == nullptr || !parent->is_object() || !parent->empty() ||
          owns_at_or_below(kept, base))
        break;
      erase_at(result, base);
    }
  }
}

}  // namespace

json merge_patch(const json& target, const json& patch) {
  if (!patch.is_object()) return patch;
  json result = target.is_object() ? target : json::object();
  for (const auto& [k, v] : patch.items()) {
    if (v.is_null()) result.erase(k);
    else result[k] = merge_patch(result.contains(k) ? result[k] : json(), v);
  }
  return result;
}

json json_patch_apply(const json& target, const json& operations) {
  if (!operations.is_array()) throw std::invalid_argument("a JSON patch must be an array of operations");
  json doc = target;
  for (size_t i = 0; i < operations.size(); ++i) {
    const json& op = operations[i];
    try {
      apply_operation(doc, op);
    } catch (const std::exception& e) {
      std::string what = "json patch operation " + std::to_string(i);
      if (op.is_object() && op.contains("op") && op.contains("path"))
        what += " (" + (op["op"].is_string() ? op["op"].get<std::string>() : op["op"].dump()) + " " +
                (op["path"].is_string() ? op["path"].get<std::string>() : op["path"].dump()) + ")";
      throw std::invalid_argument(what + ": " + e.what());
    }
  }
  return doc;
}

json server_side_apply(const json& live, const json& applied, const std::string& field_manager, bool force) {
  if (!applied.is_object()) throw std::invalid_argument("an apply configuration must be an object, not " + std::string(applied.type_name()));
  if (field_manager.empty()) throw std::invalid_argument("fieldManager is required for apply requests: pass ?fieldManager=NAME");
  json config = apply_configuration(applied);
  FieldSet applied_fields;
  FieldPath prefix;
  collect_fields(config, prefix, applied_fields);

  json result = live.is_object() ? live : json::object();
  std::vector<Manager> managers;
  if (result.contains("metadata") && result["metadata"].contains("managedFields") && result["metadata"]["managedFields"].is_array())
    for (const json& e : result["metadata"]["managedFields"]) {
      Manager m{e, {}, e.value("manager", "") == field_manager && e.value("operation", "") == "Apply", false};
      if (e.contains("fieldsV1") && e["fieldsV1"].is_object()) fields_from_v1(e["fieldsV1"], prefix, m.fields);
      managers.push_back(std::move(m));
    }

  std::map<std::string, std::vector<std::string>> conflicts;  // "\"manager\"" -> fields
  size_t conflict_count = 0;
  for (Manager& m : managers) {
    if (m.entry.value("manager", "") == field_manager) continue;
    for (auto it = m.fields.begin(); it != m.fields.end();) {
      if (!apply_changes(result, config, applied_fields, *it)) {
        ++it;
      } else if (force) {
        it = m.fields.erase(it), m.changed = true;
      } else {
        std::string who = json(m.entry.value("manager", "")).dump();  // quoted
        if (m.entry.value("operation", "") == "Update" && m.entry.contains("apiVersion")) who += " using " + m.entry.value("apiVersion", "");
        conflicts[who].push_back(render_path(*it++)), ++conflict_count;
      }
    }
  }
  if (conflict_count > 0) throw ApplyConflict(conflict_message(conflicts, conflict_count));

  merge_applied(result, config, "");
  FieldSet previous, kept = applied_fields;
  for (const Manager& m : managers) (m.is_applier ? previous : kept).insert(m.fields.begin(), m.fields.end());
  remove_dropped_fields(result, previous, kept);

  const json api_version = applied.contains("apiVersion") && applied["apiVersion"].is_string() ? applied["apiVersion"] : json("");
  json own = {{"manager", field_manager}, {"operation", "Apply"}, {"apiVersion", api_version}, {"time", now_rfc3339()},
              {"fieldsType", "FieldsV1"}, {"fieldsV1", fields_to_v1(applied_fields)}};
  // A no-op apply keeps its entry's time, so the object does not change at all.
  auto content = [](json o) {
    if (o.is_object() && o.contains("metadata") && o["metadata"].is_object()) o["metadata"].erase("managedFields");
    return o;
  };
  for (const Manager& m : managers)
    if (m.is_applier && m.entry.contains("time") && m.entry.value("fieldsV1", json()) == own["fieldsV1"] && content(live) == content(result))
      own["time"] = m.entry["time"];
  json managed = json::array();
  bool placed = false;
  for (const Manager& m : managers) {
    if (m.is_applier) {
      if (!placed && !applied_fields.empty()) managed.push_back(own);
      placed = true;
    } else if (!m.changed) {
      managed.push_back(m.entry);
    } else if (!m.fields.empty()) {
      managed.push_back(m.entry);
      managed.back()["fieldsV1"] = fields_to_v1(m.fields);
    }
  }
  if (!placed && !applied_fields.empty()) managed.push_back(own);

  if (applied.contains("apiVersion")) result["apiVersion"] = applied["apiVersion"];
  if (applied.contains("kind")) result["kind"] = applied["kind"];
  const json meta = applied.value("metadata", json::object());
  for (const char* f : {"name", "namespace"})
    if (meta.is_object() && meta.contains(f) && !meta[f].is_null()) result["metadata"][f] = meta[f];
  result["metadata"]["managedFields"] = std::move(managed);
  return result;
}

}  // namespace qsync::kube_test
