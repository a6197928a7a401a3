// File: tests/kube_api_server/label_selector.h
// Label and field selectors as the Kubernetes API server reads them from a list or watch
// request's `labelSelector` and `fieldSelector` query parameters. A label selector is a
// comma-separated list of requirements: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`,
// `a` (exists), `!a` (does not exist), and `a>1` / `a<1` (integer comparison); whitespace
// between tokens is ignored. `!=` and `notin` also match objects that lack the label, as in
// Kubernetes. A field selector is `field=value`, `field==value` or `field!=value`, comma-
// separated, over the fields the API server indexes: metadata.name, metadata.namespace,
// status.phase, spec.nodeName and, for Events, involvedObject.*; a missing field reads as "".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

using json = nlohmann::json;

class LabelSelector {
 public:
  // Throws std::invalid_argument naming the bad part ("unable to parse requirement: ...").
  static LabelSelector parse(const std::string& s);

  // `labels` is an object of string values (metadata.labels) or null (no labels).
  bool matches(const json& labels) const;

  // True when the selector has no requirements: it matches every object.
  bool empty() const { return requirements_.empty(); }

 private:
  enum class Operator { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist, kGreaterThan, kLessThan };
  struct Requirement {
    std::string key;
    Operator op = Operator::kExists;
    std::vector<std::string> values;
  };
  bool requirement_matches(const Requirement& r, const json& labels) const;

  std::vector<Requirement> requirements_;
};

// True when `object` satisfies every term of `selector` (an empty selector matches all).
// Throws std::invalid_argument for a malformed term or "field label not supported: X".
bool field_selector_matches(const std::string& selector, const json& object);

}  // namespace qsync::kube_test
