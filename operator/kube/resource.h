// File: operator/kube/resource.h
// The resource types the operator talks to, as data: group, version, plural, kind and scope
// give every REST path (the core group "" lives under /api/v1, the others under
// /apis/GROUP/VERSION). One table lists the built-in ones; custom resources are made from their
// CRD's names.
#pragma once

#include <string>
#include <utility>

namespace qsync::kube {

struct ResourceType {
  std::string group;    // "" for core
  std::string version;  // "v1", "v1alpha1"
  std::string plural;   // "pods"
  std::string kind;     // "Pod"
  bool namespaced = true;

  std::string api_version() const;  // "v1" or "GROUP/VERSION"
  // /api/v1/namespaces/NS/pods[/NAME[/SUBRESOURCE]]; an empty namespace on a namespaced type
  // means all namespaces (/api/v1/pods); a cluster-scoped type ignores the namespace.
  std::string path(const std::string& ns = "", const std::string& name = "", const std::string& subresource = "") const;
};

// Built-in types the operator uses.
const ResourceType& pods_type();
const ResourceType& services_type();
const ResourceType& config_maps_type();
const ResourceType& events_type();
const ResourceType& nodes_type();
const ResourceType& namespaces_type();
const ResourceType& leases_type();  // coordination.k8s.io/v1
const ResourceType& custom_resource_definitions_type();  // apiextensions.k8s.io/v1, cluster-scoped
const ResourceType& deployments_type();    // apps/v1
const ResourceType& stateful_sets_type();  // apps/v1

// "namespace/name" (or "name" for cluster-scoped objects): the work-queue key.
std::string object_key(const std::string& ns, const std::string& name);
std::pair<std::string, std::string> split_object_key(const std::string& key);  // {ns, name}

// Percent-encodes everything but RFC 3986's unreserved characters (A-Z a-z 0-9 - . _ ~): for a
// path segment or a query value ("app=x,tier in (a,b)" -> "app%3Dx%2Ctier%20in%20%28a%2Cb%29").
std::string url_escape(const std::string& s);

}  // namespace qsync::kube
