// File: operator/controller/finalizers.cpp
// metadata.finalizers edits and the deletionTimestamp check.
#include "operator/controller/finalizers.h"

#include <algorithm>

namespace qsync::controller {

namespace {
const json* finalizers_of(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return nullptr;
  const json& meta = object["metadata"];
  if (!meta.contains("finalizers") || !meta["finalizers"].is_array()) return nullptr;
  return &meta["finalizers"];
}
}  // namespace

bool has_finalizer(const json& object, const std::string& finalizer) {
  const json* list = finalizers_of(object);
  if (!list) return false;
  return std::any_of(list->begin(), list->end(), [&](const json& f) { return f.is_string() && f == finalizer; });
}

bool add_finalizer(json& object, const std::string& finalizer) {
  if (has_finalizer(object, finalizer)) return false;
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = json::object();
  json& list = object["metadata"]["finalizers"];
  if (!list.is_array()) list = json::array();
  list.push_back(finalizer);
  return true;
}

bool remove_finalizer(json& object, const std::string& finalizer) {
  if (!has_finalizer(object, finalizer)) return false;
  json& list = object["metadata"]["finalizers"];
  json kept = json::array();
  for (const json& f : list) {
    if (!(f.is_string() && f == finalizer)) kept.push_back(f);
  }
  list = std::move(kept);
  return true;
}

bool is_being_deleted(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return false;
  const json& meta = object["metadata"];
  return meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null() &&
         !(meta["deletionTimestamp"].is_string() && meta["deletionTimestamp"].get<std::string>().empty());
}

}  // namespace qsync::controller
