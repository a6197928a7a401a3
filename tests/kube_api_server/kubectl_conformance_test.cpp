// File: tests/kube_api_server/kubectl_conformance_test.cpp
// Drives the Kubernetes API test server with the real kubectl: apply a CRD and a custom object
// (twice: the second apply patches), get with the CRD's printer columns and as JSON, patch
// (merge, and the status subresource), apply an invalid object (rejected with the schema's
// message) and one with an unknown field (strict field validation), server-side apply, delete; and built-ins (get pods, create configmap). A failing
// step prints kubectl's output and the HTTP exchanges the server saw. Skipped when no kubectl
// is on PATH (scripts/install-deps.sh installs Debian's kubernetes-client then).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/kube_api_server/api_server.h"

#ifndef QSYNC_KUBE_TESTDATA_DIR
#error "QSYNC_KUBE_TESTDATA_DIR must name tests/kube_api_server/testdata"
#endif

namespace qsync::kube_test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string find_kubectl() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / "kubectl";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

struct KubectlRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

class KubectlConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kubectl_ = find_kubectl();
    if (kubectl_.empty()) GTEST_SKIP() << "no kubectl on PATH (scripts/install-deps.sh installs kubernetes-client)";
    dir_ = fs::temp_directory_path() / (std::to_string(::getpid()).insert(0, "kubectl-conformance-"));
    fs::create_directories(dir_);
    server_.start();
    server_.write_kubeconfig((dir_ / "kubeconfig").string());
  }
  void TearDown() override {
    server_.stop();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  KubectlRun kubectl(const std::string& args) {
    std::string command = kubectl_ + " --kubeconfig " + (dir_ / "kubeconfig").string() + " --cache-dir " +
                          (dir_ / "cache").string() + " --request-timeout=20s " + args + " 2>&1";
    KubectlRun run{-1, ""};
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return run;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.output.append(buf.data(), n);
    int status = ::pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
  }

  // What a failing step prints: kubectl's own words and the server's last exchanges.
  std::string report(const std::string& args, const KubectlRun& run) {
    return "kubectl " + args + " (exit " + std::to_string(run.exit_code) + "):\n" + run.output +
           "\n--- HTTP exchanges the test server saw (oldest first) ---\n" + server_.recent_requests_text();
  }

  // Runs a step that must succeed and whose output must contain each of `expected`.
  std::string succeed(const std::string& args, const std::vector<std::string>& expected = {}) {
    KubectlRun run = kubectl(args);
    EXPECT_EQ(run.exit_code, 0) << report(args, run);
    for (const auto& text : expected) EXPECT_NE(run.output.find(text), std::string::npos) << "missing \"" << text << "\"\n" << report(args, run);
    return run.output;
  }

  json get_json(const std::string& args) {
    KubectlRun run = kubectl(args + " -o json");
    EXPECT_EQ(run.exit_code, 0) << report(args, run);
    json parsed = json::parse(run.output, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << report(args, run);
    return parsed.is_discarded() ? json::object() : parsed;
  }

  static std::string testdata(const std::string& name) { return std::string(QSYNC_KUBE_TESTDATA_DIR) + "/" + name; }

  std::string kubectl_;
  fs::path dir_;
  ApiServer server_;
};

TEST_F(KubectlConformanceTest, CustomResourceLifecycle) {
  succeed("apply -f " + testdata("widget_crd.yaml"), {"customresourcedefinition.apiextensions.k8s.io/widgets.test.qsync.io created"});
  succeed("get crd widgets.test.qsync.io", {"widgets.test.qsync.io"});
  succeed("apply -f " + testdata("widget.yaml"), {"widget.test.qsync.io/gear created"});
  succeed("apply -f " + testdata("widget_edited.yaml"), {"widget.test.qsync.io/gear configured"});
  EXPECT_NE(server_.recent_requests_text().find("PATCH /apis/test.qsync.io/v1alpha1/namespaces/default/widgets/gear"), std::string::npos)
      << "the second apply should patch:\n" << server_.recent_requests_text();

  std::string table = succeed("get widgets", {"NAME", "SIZE", "REPLICAS", "PHASE", "AGE", "gear", "large"});
  json gear = get_json("get widget gear");
  EXPECT_EQ(gear["spec"]["size"], "large");
  EXPECT_EQ(gear["spec"]["replicas"], 3);
  EXPECT_EQ(gear["spec"]["color"], "blue");  // the schema's default
  EXPECT_EQ(gear["metadata"]["generation"], 2);
  EXPECT_TRUE(gear["metadata"]["annotations"].contains("kubectl.kubernetes.io/last-applied-configuration"));

  succeed("patch widget gear --type merge -p '{\"spec\":{\"replicas\":5}}'", {"widget.test.qsync.io/gear patched"});
  succeed("patch widget gear --type merge --subresource status -p '{\"status\":{\"phase\":\"Ready\"}}'", {"patched"});
  succeed("get wdg", {"Ready", "5"});  // short name, printer columns with status
  EXPECT_EQ(succeed("get widget gear -o jsonpath={.spec.replicas}"), "5");

  KubectlRun invalid = kubectl("apply -f " + testdata("widget_invalid.yaml"));
  EXPECT_NE(invalid.exit_code, 0) << report("apply widget_invalid.yaml", invalid);
  EXPECT_NE(invalid.output.find("spec.replicas"), std::string::npos) << report("apply widget_invalid.yaml", invalid);
  EXPECT_NE(invalid.output.find("less than or equal to 10"), std::string::npos) << invalid.output;
  EXPECT_NE(invalid.output.find("Unsupported value: \"huge\""), std::string::npos) << invalid.output;

  KubectlRun unknown = kubectl("apply -f " + testdata("widget_unknown_field.yaml"));
  EXPECT_NE(unknown.exit_code, 0) << report("apply widget_unknown_field.yaml", unknown);
  EXPECT_NE(unknown.output.find("unknown field \"spec.colour\""), std::string::npos) << report("apply widget_unknown_field.yaml", unknown);

  KubectlRun strategic = kubectl("patch widget gear -p '{\"spec\":{\"replicas\":1}}'");
  EXPECT_NE(strategic.exit_code, 0) << "strategic merge patch must be refused for custom resources\n" << report("patch", strategic);

  succeed("apply --server-side --force-conflicts -f " + testdata("widget.yaml"), {"serverside-applied"});
  EXPECT_EQ(get_json("get widget gear")["spec"]["size"], "small");

  succeed("delete -f " + testdata("widget.yaml"), {"deleted"});
  succeed("get widgets", {"No resources found"});
  succeed("delete -f " + testdata("widget_crd.yaml"), {"deleted"});
}

TEST_F(KubectlConformanceTest, BuiltinResources) {
  succeed("get pods", {"No resources found in default namespace"});
  succeed("create configmap settings --from-literal=mode=fast --from-literal=level=3", {"configmap/settings created"});
  json cm = get_json("get configmap settings");
  EXPECT_EQ(cm["data"]["mode"], "fast");
  EXPECT_EQ(cm["data"]["level"], "3");
  succeed("label configmap settings tier=web", {"labeled"});
  succeed("get configmaps -l tier=web", {"settings"});
  succeed("create namespace team", {"namespace/team created"});
  succeed("get namespaces", {"default", "team"});
  succeed("delete configmap settings", {"deleted"});
  succeed("get configmaps", {"No resources found"});
}

}  // namespace
}  // namespace qsync::kube_test
