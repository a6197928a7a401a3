# File: tests/charts/test_chart_apply.py
# The rendered Helm chart applied for real: every object the chart renders (with its default
# values, and with namespaced RBAC and the ServiceMonitor off) plus the chart's CRDs, applied with
# the real kubectl (`kubectl apply -f`) to a fresh Kubernetes API test server
# (qsync-kube-test-server from $QSYNC_BIN_DIR), the `helm install` equivalent; then every object
# is read back with `kubectl get` and must hold what was rendered. Exits 77 (skipped) when
# kubectl or the test server binary is missing.
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

from chart_rendering import CHART_DIR, RELEASE_NAMESPACE, render_objects

SKIP_EXIT_CODE = 77
KUBECTL = shutil.which("kubectl")
BIN_DIR = os.environ.get("QSYNC_BIN_DIR", "")
SERVER_BINARY = os.path.join(BIN_DIR, "qsync-kube-test-server") if BIN_DIR else ""

NAMESPACED_VALUES = {"rbac": {"namespaced": True}, "metrics": {"serviceMonitor": {"enabled": False}}}


def missing_tools():
    """Why the test cannot run here ("" when it can)."""
    if KUBECTL is None:
        return "no kubectl on PATH (scripts/install-deps.sh installs Debian's kubernetes-client)"
    if not SERVER_BINARY or not os.access(SERVER_BINARY, os.X_OK):
        return (f"no qsync-kube-test-server in QSYNC_BIN_DIR={BIN_DIR!r}; build it "
                "(ninja qsync-kube-test-server) and run this test through ctest")
    return ""


def chart_crds():
    """The CRDs in the chart's crds/ folder (Helm installs them before the templates)."""
    crds_dir = os.path.join(CHART_DIR, "crds")
    crds = []
    for name in sorted(os.listdir(crds_dir)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(crds_dir, name), encoding="utf-8") as f:
                crds.extend(d for d in yaml.safe_load_all(f) if d)
    return crds


def resource_name(obj):
    """kubectl's name for the object's type: "deployment.apps", "configmap", ..."""
    api_version = obj["apiVersion"]
    kind = obj["kind"].lower()
    return f"{kind}.{api_version.split('/')[0]}" if "/" in api_version else kind


def missing_from(expected, actual, path=""):
    """Where `actual` lacks what `expected` holds (maps: every key; other values: equal)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '.'}: expected a map, found {actual!r}"]
        problems = []
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing")
            else:
                problems.extend(missing_from(value, actual[key], f"{path}.{key}"))
        return problems
    if expected != actual:
        return [f"{path}: rendered {expected!r}, read back {actual!r}"]
    return []


class TestServer:
    """A qsync-kube-test-server process and a kubeconfig that points kubectl at it."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="chart-apply-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.log = open(os.path.join(self.dir, "server.err"), "w+", encoding="utf-8")
        self.process = subprocess.Popen([SERVER_BINARY, "--write-kubeconfig", self.kubeconfig],
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise AssertionError(f"qsync-kube-test-server did not print its URL (got {self.url!r})")

    def kubectl(self, *args, check=True):
        command = [KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", os.path.join(self.dir, "cache"),
                   "--request-timeout=20s", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed (exit {result.returncode}):\n"
                                 f"{result.stdout}{result.stderr}\n--- exchanges the test server saw ---\n"
                                 f"{self.recent_requests()}")
        return result

    def recent_requests(self):
        import urllib.request
        try:
            with urllib.request.urlopen(self.url + "/_test/requests", timeout=5) as response:
                return response.read().decode()
        except OSError as error:
            return f"(could not read {self.url}/_test/requests: {error})"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ChartApplyTest(unittest.TestCase):
    def apply_and_read_back(self, values):
        objects = render_objects(values)
        self.assertTrue(objects, "the chart rendered no objects")
        crds = chart_crds()
        self.assertTrue(crds, f"no CRDs in {CHART_DIR}/crds")
        server = TestServer()
        try:
            manifests = os.path.join(server.dir, "rendered.yaml")
            with open(manifests, "w", encoding="utf-8") as f:
                yaml.safe_dump_all(objects, f, sort_keys=False)
            crd_file = os.path.join(server.dir, "crds.yaml")
            with open(crd_file, "w", encoding="utf-8") as f:
                yaml.safe_dump_all(crds, f, sort_keys=False)

            # What `helm install --create-namespace` does: the namespace, the CRDs, the templates.
            server.kubectl("create", "namespace", RELEASE_NAMESPACE)
            server.kubectl("apply", "-f", crd_file)
            server.kubectl("apply", "-f", manifests)

            for obj in crds + objects:
                meta = obj["metadata"]
                args = ["get", f"{resource_name(obj)}/{meta['name']}", "-o", "json"]
                if "namespace" in meta or obj["kind"] not in ("ClusterRole", "ClusterRoleBinding",
                                                               "CustomResourceDefinition", "Namespace"):
                    args += ["-n", meta.get("namespace", RELEASE_NAMESPACE)]
                with self.subTest(kind=obj["kind"], name=meta["name"]):
                    read_back = json.loads(server.kubectl(*args).stdout)
                    self.assertEqual(read_back["kind"], obj["kind"])
                    self.assertTrue(read_back["metadata"].get("uid"), "the server gave the object no uid")
                    expected = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
                    expected["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
                    problems = missing_from(expected, read_back)
                    self.assertFalse(problems, f"{obj['kind']} {meta['name']} read back differs:\n" +
                                     "\n".join(problems))
            return objects
        finally:
            server.stop()

    def test_default_values_apply(self):
        objects = self.apply_and_read_back(None)
        kinds = {o["kind"] for o in objects}
        for kind in ("Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "Service", "ConfigMap"):
            self.assertIn(kind, kinds, f"the default render has no {kind}")

    def test_namespaced_rbac_without_service_monitor_applies(self):
        objects = self.apply_and_read_back(NAMESPACED_VALUES)
        kinds = [o["kind"] for o in objects]
        self.assertNotIn("ServiceMonitor", kinds)
        self.assertGreaterEqual(kinds.count("Role"), 2, "namespaced RBAC renders the rules and leader-election Roles")


if __name__ == "__main__":
    why = missing_tools()
    if why:
        print(f"SKIPPED: {why}", file=sys.stderr)
        sys.exit(SKIP_EXIT_CODE)
    unittest.main()
