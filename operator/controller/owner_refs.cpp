// File: operator/controller/owner_refs.cpp
// Controller owner references: set one, read one, map a child to its owner's key.
#include "operator/controller/owner_refs.h"

#include <stdexcept>

#include "operator/kube/resource.h"

namespace qsync::controller {

namespace {
std::string meta_string(const json& object, const char* field) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
  return object["metadata"].value(field, "");
}
}  // namespace

std::string group_of_api_version(const std::string& api_version) {
  const auto slash = api_version.find('/');
  return slash == std::string::npos ? "" : api_version.substr(0, slash);
}

std::optional<json> controller_reference_of(const json& child) {
  if (!child.contains("metadata") || !child["metadata"].contains("ownerReferences")) return std::nullopt;
  for (const json& ref : child["metadata"]["ownerReferences"]) {
    if (ref.value("controller", false)) return ref;
  }
  return std::nullopt;
}

void set_controller_reference(json& child, const json& owner) {
  const std::string api_version = owner.value("apiVersion", "");
  const std::string kind = owner.value("kind", "");
  const std::string name = meta_string(owner, "name");
  const std::string uid = meta_string(owner, "uid");
  if (api_version.empty() || kind.empty() || name.empty() || uid.empty()) {
    throw std::invalid_argument(
        "set_controller_reference: the owner needs apiVersion, kind, metadata.name and metadata.uid "
        "(use the object as the API server returned it)");
  }
  const std::string owner_ns = meta_string(owner, "namespace");
  const std::string child_ns = meta_string(child, "namespace");
  if (!owner_ns.empty() && owner_ns != child_ns) {
    throw std::invalid_argument("set_controller_reference: " + kind + " " + owner_ns + "/" + name +
                                " cannot own an object in namespace '" + child_ns +
                                "': owner references do not cross namespaces");
  }
  if (!child.contains("metadata") || !child["metadata"].is_object()) child["metadata"] = json::object();
  json& refs = child["metadata"]["ownerReferences"];
  if (!refs.is_array()) refs = json::array();
  const std::string group = group_of_api_version(api_version);
  for (const json& ref : refs) {
    const bool same_owner = group_of_api_version(ref.value("apiVersion", "")) == group &&
                            ref.value("kind", "") == kind && ref.value("name", "") == name;
    if (ref.value("controller", false) && !same_owner) {
      throw std::invalid_argument("set_controller_reference: " + meta_string(child, "name") +
                                  " is already controlled by " + ref.value("kind", "") + " " +
                                  ref.value("name", "") + "; an object has one controller");
    }
  }
  json reference = {{"apiVersion", api_version}, {"kind", kind},      {"name", name},
                    {"uid", uid},                {"controller", true}, {"blockOwnerDeletion", true}};
  for (json& ref : refs) {
    if (group_of_api_version(ref.value("apiVersion", "")) == group && ref.value("kind", "") == kind &&
        ref.value("name", "") == name) {
      ref = reference;
      return;
    }
  }
  refs.push_back(reference);
}

std::optional<std::string> owner_key_of(const json& child, const std::string& owner_api_version,
                                        const std::string& owner_kind, bool owner_namespaced) {
  std::optional<json> ref = controller_reference_of(child);
  if (!ref) return std::nullopt;
  if (ref->value("kind", "") != owner_kind) return std::nullopt;
  if (group_of_api_version(ref->value("apiVersion", "")) != group_of_api_version(owner_api_version)) {
    return std::nullopt;
  }
  const std::string name = ref->value("name", "");
  if (name.empty()) return std::nullopt;
  return kube::object_key(owner_namespaced ? meta_string(child, "namespace") : "", name);
}

}  // namespace qsync::controller
