// File: tests/operator/kube/kube_config_test.cpp
// Kubeconfig parsing (token, tokenFile, client certificate and CA as data or files, the
// insecure flag, named and current contexts, clear errors for what is missing) and in-cluster
// configuration from a temp root, including the token file re-read when it rotates.
#include "operator/kube/kube_config.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace qsync::kube {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kube-config-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& content) const {
    fs::path file = fs::path(path_) / fs::path(name).relative_path();  // "/var/..." lands under the root
    fs::create_directories(file.parent_path());
    std::ofstream(file) << content;
    return file.string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::string expect_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// The data fields are base64 of "CA PEM\n", "CERT PEM\n" and "KEY PEM\n".
const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://10.1.2.3:6443/
    certificate-authority-data: Q0EgUEVNCg==
- name: lab-cluster
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: dev-user
    namespace: team-a
- name: lab
  context:
    cluster: lab-cluster
    user: lab-user
users:
- name: dev-user
  user:
    token: abc.def
- name: lab-user
  user:
    client-certificate-data: Q0VSVCBQRU0K
    client-key-data: S0VZIFBFTQo=
)";

TEST(KubeConfigTest, CurrentContextWithTokenAndCaData) {
  TempDir dir;
  std::string path = dir.write("config", kTwoContexts);
  KubeConfig config = kube_config_from_file(path);
  EXPECT_EQ(config.server, "https://10.1.2.3:6443");  // trailing slash dropped
  EXPECT_EQ(config.token, "abc.def");
  EXPECT_EQ(config.bearer_token(), "abc.def");
  EXPECT_EQ(config.namespace_, "team-a");
  EXPECT_FALSE(config.insecure_skip_tls_verify);  // verification is on by default
  ASSERT_FALSE(config.ca_file.empty());
  EXPECT_EQ(read_file(config.ca_file), "CA PEM\n");
  struct stat st {};
  ASSERT_EQ(::stat(config.ca_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(config.client_cert_file.empty());
  EXPECT_NE(config.source.find("context dev"), std::string::npos);
}

TEST(KubeConfigTest, NamedContextWithClientCertificateDataAndInsecureFlag) {
  TempDir dir;
  KubeConfig config = kube_config_from_file(dir.write("config", kTwoContexts), "lab");
  EXPECT_EQ(config.server, "http://127.0.0.1:8080");
  EXPECT_TRUE(config.insecure_skip_tls_verify);
  EXPECT_TRUE(config.token.empty());
  EXPECT_EQ(config.namespace_, "default");
  EXPECT_EQ(read_file(config.client_cert_file), "CERT PEM\n");
  EXPECT_EQ(read_file(config.client_key_file), "KEY PEM\n");
  struct stat st {};
  ASSERT_EQ(::stat(config.client_key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(KubeConfigTest, FilePathsResolveAgainstTheKubeconfigFolderAndTokenFileRotates) {
  TempDir dir;
  dir.write("pki/ca.crt", "FILE CA\n");
  dir.write("pki/client.crt", "FILE CERT\n");
  dir.write("pki/client.key", "FILE KEY\n");
  std::string token_path = dir.write("token", "first-token\n");
  std::string path = dir.write("kube/config", R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://k.example:443", certificate-authority: ../pki/ca.crt}
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user: {tokenFile: ../token, client-certificate: ../pki/client.crt, client-key: ../pki/client.key}
)");
  KubeConfig config = kube_config_from_file(path);
  EXPECT_EQ(read_file(config.ca_file), "FILE CA\n");
  EXPECT_EQ(read_file(config.client_cert_file), "FILE CERT\n");
  EXPECT_EQ(read_file(config.client_key_file), "FILE KEY\n");
  EXPECT_EQ(fs::canonical(config.token_file), fs::canonical(token_path));
  EXPECT_EQ(config.bearer_token(), "first-token");
  dir.write("token", "rotated-token-2\n");
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567890, 0}};  // a clearly different mtime
  ASSERT_EQ(::utimensat(AT_FDCWD, token_path.c_str(), times, 0), 0);
  EXPECT_EQ(config.bearer_token(), "rotated-token-2");
}

TEST(KubeConfigTest, MissingPiecesGiveClearErrors) {
  TempDir dir;
  std::string no_current = dir.write("a", "clusters: []\ncontexts: []\nusers: []\n");
  EXPECT_NE(expect_error([&] { kube_config_from_file(no_current); }).find("no current-context"), std::string::npos);

  std::string path = dir.write("b", kTwoContexts);
  std::string unknown = expect_error([&] { kube_config_from_file(path, "prod"); });
  EXPECT_NE(unknown.find("no context named 'prod'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find(path), std::string::npos) << unknown;

  std::string no_server = dir.write("c", R"(current-context: c
clusters: [{name: k, cluster: {insecure-skip-tls-verify: true}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(no_server); }).find("has no server"), std::string::npos);

  std::string no_cluster = dir.write("d", R"(current-context: c
clusters: [{name: other, cluster: {server: "https://x"}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(no_cluster); }).find("no cluster named 'k'"), std::string::npos);

  std::string cert_without_key = dir.write("e", R"(current-context: c
clusters: [{name: k, cluster: {server: "https://x"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {client-certificate-data: Q0VSVCBQRU0K}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(cert_without_key); }).find("certificate without a key"),
            std::string::npos);

  std::string missing_ca = dir.write("f", R"(current-context: c
clusters: [{name: k, cluster: {server: "https://x", certificate-authority: /nonexistent/ca.crt}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(missing_ca); }).find("/nonexistent/ca.crt does not exist"),
            std::string::npos);

  std::string bad_base64 = dir.write("g", R"(current-context: c
clusters: [{name: k, cluster: {server: "https://x", certificate-authority-data: "not*base64"}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(bad_base64); }).find("not valid base64"), std::string::npos);

  std::string exec_plugin = dir.write("h", R"(current-context: c
clusters: [{name: k, cluster: {server: "https://x"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {exec: {command: aws}}}]
)");
  EXPECT_NE(expect_error([&] { kube_config_from_file(exec_plugin); }).find("credential plugin"), std::string::npos);

  EXPECT_NE(expect_error([&] { kube_config_from_file(dir.path() + "/absent"); }).find("cannot read"), std::string::npos);
  std::string not_yaml = dir.write("i", "key: [unclosed\n");
  EXPECT_NE(expect_error([&] { kube_config_from_file(not_yaml); }).find("not valid YAML"), std::string::npos);
}

TEST(KubeConfigTest, InClusterFromServiceAccountFiles) {
  TempDir root;
  std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount/";
  std::string token_path = root.write(sa + "token", "sa-token-1");
  root.write(sa + "ca.crt", "CLUSTER CA\n");
  root.write(sa + "namespace", "qsync-system\n");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  KubeConfig config = kube_config_in_cluster(root.path());
  EXPECT_EQ(config.server, "https://10.96.0.1:443");
  EXPECT_EQ(config.namespace_, "qsync-system");
  EXPECT_EQ(config.source, "in-cluster");
  EXPECT_FALSE(config.insecure_skip_tls_verify);
  EXPECT_EQ(read_file(config.ca_file), "CLUSTER CA\n");
  EXPECT_EQ(config.bearer_token(), "sa-token-1");
  EXPECT_EQ(config.bearer_token(), "sa-token-1");  // cached: same answer

  // A projected token rotates: the new content is picked up on the next call.
  root.write(sa + "token", "sa-token-2-rotated");
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567890, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, token_path.c_str(), times, 0), 0);
  EXPECT_EQ(config.bearer_token(), "sa-token-2-rotated");
}

TEST(KubeConfigTest, InClusterIpv6HostIsBracketedAndNamespaceDefaults) {
  TempDir root;
  std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount/";
  root.write(sa + "token", "t");
  root.write(sa + "ca.crt", "CA");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00::1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
  KubeConfig config = kube_config_in_cluster(root.path());
  EXPECT_EQ(config.server, "https://[fd00::1]:6443");
  EXPECT_EQ(config.namespace_, "default");
}

TEST(KubeConfigTest, InClusterErrorsNameWhatIsMissing) {
  TempDir root;
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    EXPECT_NE(expect_error([&] { kube_config_in_cluster(root.path()); }).find("KUBERNETES_SERVICE_HOST"),
              std::string::npos);
  }
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  std::string no_token = expect_error([&] { kube_config_in_cluster(root.path()); });
  EXPECT_NE(no_token.find("token"), std::string::npos) << no_token;
  root.write("/var/run/secrets/kubernetes.io/serviceaccount/token", "t");
  std::string no_ca = expect_error([&] { kube_config_in_cluster(root.path()); });
  EXPECT_NE(no_ca.find("ca.crt"), std::string::npos) << no_ca;
}

TEST(KubeConfigTest, LoadPrefersExplicitPathThenInClusterThenKubeconfigEnv) {
  TempDir dir;
  std::string first = dir.write("first", kTwoContexts);
  std::string second = dir.write("second", "current-context: x\n");
  KubeConfig explicit_path = kube_config_load(first, "lab");
  EXPECT_EQ(explicit_path.server, "http://127.0.0.1:8080");

  ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
  std::string list = first + ":" + second;
  ScopedEnv kubeconfig("KUBECONFIG", list.c_str());
  KubeConfig from_env = kube_config_load();
  EXPECT_EQ(from_env.server, "https://10.1.2.3:6443");

  ScopedEnv no_kubeconfig("KUBECONFIG", nullptr);
  ScopedEnv home("HOME", dir.path().c_str());
  dir.write(".kube/config", kTwoContexts);
  EXPECT_EQ(kube_config_load("", "lab").server, "http://127.0.0.1:8080");
}

}  // namespace
}  // namespace qsync::kube
