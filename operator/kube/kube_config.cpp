// File: operator/kube/kube_config.cpp
// Loads where the API server is and how to authenticate. In-cluster: KUBERNETES_SERVICE_HOST/PORT
// and the service-account files. Kubeconfig (YAML, parsed with yaml-cpp): the chosen context's
// cluster and user; base64 `*-data` fields are written to private (0600) temp files that live as
// long as the process, relative file paths resolve against the kubeconfig's folder. The bearer
// token of a token file is cached and re-read when the file's mtime or size changes.
#include "operator/kube/kube_config.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace qsync::kube {
namespace {

constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string base64_decode(const std::string& text, const std::string& what) {
  auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  unsigned int accumulator = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=' || c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    int v = value_of(c);
    if (v < 0) throw std::runtime_error(what + " is not valid base64 (unexpected character '" + std::string(1, c) + "')");
    accumulator = (accumulator << 6) | static_cast<unsigned int>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((accumulator >> bits) & 0xFF);
    }
  }
  return out;
}

// Temp files holding decoded kubeconfig data; removed when the process exits.
class PrivateTempFiles {
 public:
  ~PrivateTempFiles() {
    for (const std::string& path : paths_) ::unlink(path.c_str());
  }
  std::string write(const std::string& content, const std::string& what) {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/qsync-kube-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    int fd = ::mkstemp(name.data());  // mkstemp creates the file 0600
    if (fd < 0) throw std::runtime_error("cannot create a temp file for " + what + ": " + std::strerror(errno));
    size_t written = 0;
    while (written < content.size()) {
      ssize_t n = ::write(fd, content.data() + written, content.size() - written);
      if (n <= 0) {
        ::close(fd);
        ::unlink(name.data());
        throw std::runtime_error("cannot write the temp file for " + what + ": " + std::strerror(errno));
      }
      written += static_cast<size_t>(n);
    }
    ::close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    paths_.emplace_back(name.data());
    return paths_.back();
  }

 private:
  std::mutex mu_;
  std::vector<std::string> paths_;
};

PrivateTempFiles& temp_files() {
  static PrivateTempFiles files;
  return files;
}

struct CachedToken {
  struct timespec mtime {};
  off_t size = -1;
  std::string token;
};

std::string token_from_file(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, CachedToken> cache;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error("cannot read the bearer token file " + path + ": " + std::strerror(errno) +
                             " (is the service-account token mounted?)");
  }
  std::lock_guard<std::mutex> lock(mu);
  CachedToken& entry = cache[path];
  if (entry.size == st.st_size && entry.mtime.tv_sec == st.st_mtim.tv_sec && entry.mtime.tv_nsec == st.st_mtim.tv_nsec) {
    return entry.token;
  }
  entry.token = trim(read_whole_file(path));
  entry.mtime = st.st_mtim;
  entry.size = st.st_size;
  return entry.token;
}

// A named entry of a kubeconfig list (clusters, contexts, users): its inner map under `field`.
YAML::Node find_named(const YAML::Node& root, const std::string& list, const std::string& name,
                      const std::string& field, const std::string& where) {
  YAML::Node entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const YAML::Node& entry : entries) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        YAML::Node inner = entry[field];
        if (!inner || !inner.IsMap()) {
          throw std::runtime_error(where + ": " + list + " entry '" + name + "' has no '" + field + "' map");
        }
        return inner;
      }
    }
  }
  throw std::runtime_error(where + ": no " + field + " named '" + name + "' in '" + list +
                           "' (fix the context or add the entry)");
}

std::string string_field(const YAML::Node& map, const std::string& key) {
  YAML::Node value = map[key];
  if (!value || value.IsNull()) return "";
  return value.as<std::string>();
}

std::string resolve_path(const std::string& path, const std::filesystem::path& base_dir) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (base_dir / path).string();
}

// The file for a PEM that the kubeconfig gives either as a path or as base64 data.
std::string pem_file(const YAML::Node& map, const std::string& file_key, const std::string& data_key,
                     const std::filesystem::path& base_dir, const std::string& where) {
  std::string data = string_field(map, data_key);
  if (!data.empty()) return temp_files().write(base64_decode(data, where + " " + data_key), where + " " + data_key);
  std::string file = resolve_path(string_field(map, file_key), base_dir);
  if (!file.empty() && !file_exists(file)) {
    throw std::runtime_error(where + ": " + file_key + " " + file + " does not exist");
  }
  return file;
}

}  // namespace

std::string KubeConfig::bearer_token() const {
  if (!token_file.empty()) return token_from_file(token_file);
  return token;
}

KubeConfig kube_config_in_cluster(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    throw std::runtime_error(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set "
        "(outside a cluster, pass --kubeconfig or set KUBECONFIG)");
  }
  std::string host_part = host;
  if (host_part.find(':') != std::string::npos && host_part.front() != '[') host_part = "[" + host_part + "]";
  std::string dir = root + kServiceAccountDir;
  KubeConfig config;
  config.server = "https://" + host_part + ":" + port;
  config.token_file = dir + "/token";
  config.ca_file = dir + "/ca.crt";
  if (!file_exists(config.token_file)) {
    throw std::runtime_error("in-cluster configuration: the service-account token " + config.token_file +
                             " is missing (set automountServiceAccountToken: true on the pod)");
  }
  if (!file_exists(config.ca_file)) {
    throw std::runtime_error("in-cluster configuration: the cluster CA " + config.ca_file +
                             " is missing (the service-account volume is incomplete)");
  }
  std::string ns_file = dir + "/namespace";
  config.namespace_ = file_exists(ns_file) ? trim(read_whole_file(ns_file)) : "";
  if (config.namespace_.empty()) config.namespace_ = "default";
  config.source = "in-cluster";
  return config;
}

KubeConfig kube_config_from_file(const std::string& path, const std::string& context) {
  std::string where = "kubeconfig " + path;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::runtime_error("cannot read " + where + " (does it exist? pass --kubeconfig or set KUBECONFIG)");
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(where + " is not valid YAML: " + e.what());
  }
  if (!root.IsMap()) throw std::runtime_error(where + " is not a kubeconfig (expected a YAML map)");
  std::filesystem::path base_dir = std::filesystem::absolute(path).parent_path();

  try {
    std::string context_name = context.empty() ? string_field(root, "current-context") : context;
    if (context_name.empty()) {
      throw std::runtime_error(where + " has no current-context (run `kubectl config use-context NAME` or pass a context)");
    }
    YAML::Node ctx = find_named(root, "contexts", context_name, "context", where);
    std::string cluster_name = string_field(ctx, "cluster");
    if (cluster_name.empty()) throw std::runtime_error(where + ": context '" + context_name + "' names no cluster");
    YAML::Node cluster = find_named(root, "clusters", cluster_name, "cluster", where);

    KubeConfig config;
    config.source = where + " context " + context_name;
    config.server = string_field(cluster, "server");
    if (config.server.empty()) {
      throw std::runtime_error(where + ": cluster '" + cluster_name + "' has no server (add `server: https://HOST:PORT`)");
    }
    while (config.server.size() > 1 && config.server.back() == '/') config.server.pop_back();
    config.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
    config.ca_file = pem_file(cluster, "certificate-authority", "certificate-authority-data", base_dir,
                              where + " cluster '" + cluster_name + "'");

    std::string user_name = string_field(ctx, "user");
    if (!user_name.empty()) {
      YAML::Node user = find_named(root, "users", user_name, "user", where);
      std::string user_where = where + " user '" + user_name + "'";
      if (user["exec"] || user["auth-provider"]) {
        throw std::runtime_error(user_where +
                                 " uses an exec or auth-provider credential plugin, which qsync does not run "
                                 "(use a token, a tokenFile or a client certificate)");
      }
      config.token = string_field(user, "token");
      config.token_file = resolve_path(string_field(user, "tokenFile"), base_dir);
      if (!config.token_file.empty() && !file_exists(config.token_file)) {
        throw std::runtime_error(user_where + ": tokenFile " + config.token_file + " does not exist");
      }
      config.client_cert_file = pem_file(user, "client-certificate", "client-certificate-data", base_dir, user_where);
      config.client_key_file = pem_file(user, "client-key", "client-key-data", base_dir, user_where);
      if (config.client_cert_file.empty() != config.client_key_file.empty()) {
        throw std::runtime_error(user_where + " gives a client " +
                                 (config.client_cert_file.empty() ? "key without a certificate" : "certificate without a key") +
                                 " (set both client-certificate[-data] and client-key[-data])");
      }
    }
    config.namespace_ = string_field(ctx, "namespace");
    if (config.namespace_.empty()) config.namespace_ = "default";
    return config;
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(where + " has a field of the wrong type: " + e.what());
  }
}

KubeConfig kube_config_load(const std::string& kubeconfig_path, const std::string& context) {
  if (!kubeconfig_path.empty()) return kube_config_from_file(kubeconfig_path, context);
  const char* service_host = std::getenv("KUBERNETES_SERVICE_HOST");
  if (service_host != nullptr && *service_host != '\0') return kube_config_in_cluster();
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    std::string list = env;
    std::string first = list.substr(0, list.find(':'));
    if (!first.empty()) return kube_config_from_file(first, context);
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    throw std::runtime_error("no Kubernetes configuration: not in a cluster, KUBECONFIG unset and HOME unset "
                             "(pass --kubeconfig PATH)");
  }
  return kube_config_from_file(std::string(home) + "/.kube/config", context);
}

}  // namespace qsync::kube
