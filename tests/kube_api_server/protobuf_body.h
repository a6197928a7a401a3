// File: tests/kube_api_server/protobuf_body.h
// Reads the Kubernetes protobuf encoding of request bodies for the few built-in kinds kubectl
// sends that way (`kubectl create configmap|secret|namespace` post
// application/vnd.kubernetes.protobuf): the "k8s\0" magic, the runtime.Unknown envelope
// (typeMeta, raw), then ConfigMap, Secret or Namespace with ObjectMeta (name, generateName,
// namespace, resourceVersion, labels, annotations, ownerReferences, finalizers). Answers are
// still JSON: kubectl accepts them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

// The object as JSON. Throws std::invalid_argument naming what is malformed or which kind is
// not supported (send it as application/json instead).
nlohmann::json protobuf_body_to_json(const std::string& body);

}  // namespace qsync::kube_test
