// File: operator/kube/kube_config.h
// Where the API server is and how to authenticate: in-cluster (KUBERNETES_SERVICE_HOST/PORT and
// the service-account token, CA and namespace files under
// /var/run/secrets/kubernetes.io/serviceaccount; the token file is re-read when it changes, as
// projected tokens rotate) or a kubeconfig (--kubeconfig, else $KUBECONFIG, else ~/.kube/config;
// its current context, or a named one): bearer token (or tokenFile), client certificate and key
// (file or base64 data), CA (file or base64 data). TLS verification is on unless the kubeconfig
// says insecure-skip-tls-verify: true.
#pragma once

#include <string>

namespace qsync::kube {

struct KubeConfig {
  std::string server;            // https://host:port or http://host:port
  std::string token;             // bearer token (empty: none)
  std::string token_file;        // re-read on change (in-cluster, or kubeconfig tokenFile)
  std::string ca_file;           // PEM file (kubeconfig data is written to a private temp file)
  std::string client_cert_file;  // PEM
  std::string client_key_file;   // PEM
  bool insecure_skip_tls_verify = false;
  std::string namespace_;        // the context's namespace (in-cluster: the pod's), "default" if none
  std::string source;            // where it came from, for messages ("in-cluster", "kubeconfig PATH context C")

  // The bearer token to send now: token_file's current content when set, else token.
  std::string bearer_token() const;
};

// In-cluster configuration; `root` prefixes the service-account paths (tests). Throws
// std::runtime_error naming what is missing.
KubeConfig kube_config_in_cluster(const std::string& root = "");
// A kubeconfig file; an empty context means its current-context. Throws naming the file and
// the missing or unreadable field.
KubeConfig kube_config_from_file(const std::string& path, const std::string& context = "");
// --kubeconfig PATH if given, else in-cluster when KUBERNETES_SERVICE_HOST is set, else
// $KUBECONFIG (first file of the list), else ~/.kube/config.
KubeConfig kube_config_load(const std::string& kubeconfig_path = "", const std::string& context = "");

}  // namespace qsync::kube
