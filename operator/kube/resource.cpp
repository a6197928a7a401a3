// File: operator/kube/resource.cpp
// REST paths of resource types, the table of built-in types, work-queue keys and the
// percent-encoding the client uses for path segments and query values.
#include "operator/kube/resource.h"

namespace qsync::kube {

std::string ResourceType::api_version() const { return group.empty() ? version : group + "/" + version; }

std::string ResourceType::path(const std::string& ns, const std::string& name, const std::string& subresource) const {
  // Built with append: GCC 12 at -O3 flags `"/" + std::string` with a false -Wrestrict.
  std::string p = group.empty() ? std::string("/api") : std::string("/apis/").append(group);
  p.append("/").append(version);
  if (namespaced && !ns.empty()) p.append("/namespaces/").append(url_escape(ns));
  p.append("/").append(plural);
  if (!name.empty()) {
    p.append("/").append(url_escape(name));
    if (!subresource.empty()) p.append("/").append(subresource);
  }
  return p;
}

const ResourceType& pods_type() {
  static const ResourceType t{"", "v1", "pods", "Pod", true};
  return t;
}
const ResourceType& services_type() {
  static const ResourceType t{"", "v1", "services", "Service", true};
  return t;
}
const ResourceType& config_maps_type() {
  static const ResourceType t{"", "v1", "configmaps", "ConfigMap", true};
  return t;
}
const ResourceType& events_type() {
  static const ResourceType t{"", "v1", "events", "Event", true};
  return t;
}
const ResourceType& nodes_type() {
  static const ResourceType t{"", "v1", "nodes", "Node", false};
  return t;
}
const ResourceType& namespaces_type() {
  static const ResourceType t{"", "v1", "namespaces", "Namespace", false};
  return t;
}
const ResourceType& leases_type() {
  static const ResourceType t{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return t;
}
const ResourceType& custom_resource_definitions_type() {
  static const ResourceType t{"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                              false};
  return t;
}

const ResourceType& deployments_type() {
  static const ResourceType t{"apps", "v1", "deployments", "Deployment", true};
  return t;
}
const ResourceType& stateful_sets_type() {
  static const ResourceType t{"apps", "v1", "statefulsets", "StatefulSet", true};
  return t;
}

std::string object_key(const std::string& ns, const std::string& name) { return ns.empty() ? name : ns + "/" + name; }

std::pair<std::string, std::string> split_object_key(const std::string& key) {
  size_t slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::string url_escape(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace qsync::kube
