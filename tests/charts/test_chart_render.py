# File: tests/charts/test_chart_render.py
# The Helm chart charts/qsync, linted and rendered with Helm's Go SDK (the `helm lint` and
# `helm template` equivalents) with its default values and with non-default ones (namespaced RBAC,
# a ServiceMonitor, leader election off, a watched namespace, other ports). Checks every rendered
# object, the operator's flags against the values, the restricted security context, the probes,
# the RBAC against charts/qsync/rbac-contract.yaml (no more, no less, each rule in its scope), the
# metrics Service and ServiceMonitor, the Grafana dashboard ConfigMap, and values.schema.json.
import json
import os
import unittest

from chart_rendering import (CHART_DIR, RELEASE_NAMESPACE, helm, load_yaml_file, objects_of_kind,
                             one_object, render_notes, render_objects)

# Contract rules on cluster-scoped resources: the chart grants them in a ClusterRole even with rbac.namespaced.
CLUSTER_SCOPED = {"nodes", "resourceflavors"}
FULLNAME = "qsync"

NON_DEFAULT_VALUES = {
    "watchNamespace": "ml-team",
    "rbac": {"namespaced": True},
    "leaderElection": {"enabled": False},
    "metrics": {"port": 9090, "serviceMonitor": {"enabled": True, "interval": "15s",
                                                  "labels": {"release": "kube-prometheus"}}},
    "health": {"port": 9091},
    "workers": 8,
    "workerPods": {"gpuTolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                       "effect": "NoSchedule"}],
                   "podMonitor": {"enabled": True, "interval": "10s", "labels": {"release": "kube-prometheus"}},
                   "gangSchedulerName": "coscheduler"},
    "api": {"qps": 50, "burst": 100},
    "workerImage": "registry.example/qsync-worker:1.2.3",
    "gpuWorkerImage": "registry.example/qsync-worker-cuda:1.2.3",
    "image": {"repository": "registry.example/qsync-operator", "tag": "1.2.3", "pullPolicy": "Always"},
    "serviceAccount": {"name": "trainer-operator", "annotations": {"team": "ml"}},
    "grafana": {"dashboard": {"namespace": "monitoring", "labels": {"grafana_dashboard": "1",
                                                                    "team": "ml"}}},
}

# Leader election on with its own namespace, namespaced RBAC with the release namespace watched.
LEASE_ELSEWHERE_VALUES = {
    "rbac": {"namespaced": True},
    "leaderElection": {"enabled": True, "namespace": "qsync-leases"},
}


def contract_rules():
    """The RBAC contract as a set of (apiGroup, resource, verb)."""
    contract = load_yaml_file(os.path.join(CHART_DIR, "rbac-contract.yaml"))
    return {(r["apiGroup"], r["resource"], verb) for r in contract["rules"] for verb in r["verbs"]}


def rule_triples(rules, where):
    """Expands RBAC rules into (apiGroup, resource, verb); refuses wildcards, resourceNames and
    nonResourceURLs, which the least-privilege contract never needs."""
    triples = set()
    for rule in rules:
        extra = set(rule) - {"apiGroups", "resources", "verbs"}
        if extra:
            raise AssertionError(f"{where}: rule {rule} carries {sorted(extra)}; the contract has none")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if "*" in (group, resource, verb):
                        raise AssertionError(f"{where}: wildcard in rule {rule}")
                    triples.add((group, resource, verb))
    return triples


def granted_rules(objects, service_account, sa_namespace):
    """What the operator's ServiceAccount is granted: {scope: triples}, where scope is "cluster" for
    ClusterRoleBindings and the namespace for RoleBindings."""
    granted = {}
    for binding in objects_of_kind(objects, "ClusterRoleBinding") + objects_of_kind(objects, "RoleBinding"):
        subjects = binding["subjects"]
        if {"kind": "ServiceAccount", "name": service_account, "namespace": sa_namespace} not in subjects:
            raise AssertionError(f"{binding['kind']} {binding['metadata']['name']} binds {subjects}, "
                                 f"not the operator's ServiceAccount {sa_namespace}/{service_account}")
        ref = binding["roleRef"]
        if binding["kind"] == "ClusterRoleBinding":
            scope = "cluster"
            role = one_object(objects, "ClusterRole", ref["name"])
            assert ref["kind"] == "ClusterRole", ref
        else:
            scope = binding["metadata"]["namespace"]
            role = one_object(objects, ref["kind"], ref["name"])
            if ref["kind"] == "Role":
                assert role["metadata"]["namespace"] == scope, (role["metadata"], scope)
        triples = rule_triples(role["rules"], f"{role['kind']} {role['metadata']['name']}")
        granted.setdefault(scope, set()).update(triples)
    bound = {b["roleRef"]["name"] for b in objects_of_kind(objects, "ClusterRoleBinding") +
             objects_of_kind(objects, "RoleBinding")}
    for role in objects_of_kind(objects, "ClusterRole") + objects_of_kind(objects, "Role"):
        if role["metadata"]["name"] not in bound:
            raise AssertionError(f"{role['kind']} {role['metadata']['name']} is rendered but never bound")
    return granted


def parse_args(args):
    """Operator arguments into {flag: value}: "--flag value" pairs and "--flag=value" tokens."""
    parsed = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            raise AssertionError(f"argument {token!r} is not a flag (args: {args})")
        if "=" in token:
            flag, value = token.split("=", 1)
            i += 1
        else:
            flag, value = token, args[i + 1]
            i += 2
        if flag in parsed:
            raise AssertionError(f"{flag} given twice in {args}")
        parsed[flag] = value
    return parsed


def operator_container(objects):
    deployment = one_object(objects, "Deployment", FULLNAME)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    return deployment, containers[0]


class ChartLintTest(unittest.TestCase):
    def test_lint_is_clean_with_default_and_non_default_values(self):
        for values in (None, NON_DEFAULT_VALUES, LEASE_ELSEWHERE_VALUES):
            with self.subTest(values=values):
                report = helm.lint(CHART_DIR, values, strict=True, namespace=RELEASE_NAMESPACE,
                                   kube_version="v1.30.0")
                problems = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(report["errors"], [], report)
                self.assertEqual(problems, [], report)

    def test_chart_metadata(self):
        with helm.Chart.load(CHART_DIR) as chart:
            metadata = chart.metadata
        self.assertEqual(metadata["apiVersion"], "v2")
        self.assertEqual(metadata["name"], "qsync")
        self.assertEqual(metadata["version"], "0.1.0")
        self.assertEqual(metadata["appVersion"], "0.1.0")
        self.assertEqual(metadata["kubeVersion"], ">=1.25.0-0")


class DefaultRenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = render_objects()

    def test_renders_the_expected_objects(self):
        kinds = sorted((o["kind"], o["metadata"]["name"]) for o in self.objects)
        self.assertEqual(kinds, sorted([
            ("ClusterRole", FULLNAME), ("ClusterRoleBinding", FULLNAME),
            ("ConfigMap", f"{FULLNAME}-dashboard"), ("Deployment", FULLNAME),
            ("Role", f"{FULLNAME}-leader-election"), ("RoleBinding", f"{FULLNAME}-leader-election"),
            ("Service", f"{FULLNAME}-metrics"), ("ServiceAccount", FULLNAME)]))
        for o in self.objects:
            if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                self.assertEqual(o["metadata"]["namespace"], RELEASE_NAMESPACE, o["metadata"])

    def test_deployment_args_match_default_values(self):
        deployment, container = operator_container(self.objects)
        self.assertEqual(deployment["spec"]["replicas"], 1)
        self.assertEqual(container["image"], "qsync-operator:0.1.0")
        self.assertEqual(container["imagePullPolicy"], "IfNotPresent")
        self.assertEqual(parse_args(container["args"]), {
            "--leader-elect": "true",
            "--leader-election-namespace": RELEASE_NAMESPACE,
            "--leader-election-id": FULLNAME,
            "--metrics-port": "8080", "--health-port": "8081", "--workers": "4",
            "--qps": "20", "--burst": "30", "--worker-image": "qsync-worker:0.1.0",
            "--gpu-tolerations": '[{"effect":"NoSchedule","key":"nvidia.com/gpu","operator":"Exists"}]'})
        self.assertEqual(deployment["spec"]["template"]["spec"]["serviceAccountName"], FULLNAME)
        self.assertEqual(container["resources"], {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                  "limits": {"cpu": "500m", "memory": "512Mi"}})

    def test_security_context_is_restricted(self):
        deployment, container = operator_container(self.objects)
        pod = deployment["spec"]["template"]["spec"]["securityContext"]
        self.assertTrue(pod["runAsNonRoot"])
        self.assertEqual(pod["runAsUser"], 65532)
        self.assertEqual(pod["seccompProfile"], {"type": "RuntimeDefault"})
        sc = container["securityContext"]
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertTrue(sc["runAsNonRoot"])
        self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
        self.assertFalse(sc.get("privileged", False))
        self.assertNotIn("hostNetwork", deployment["spec"]["template"]["spec"])

    def test_probes_point_at_the_health_port(self):
        _, container = operator_container(self.objects)
        assert_probes_on_port(self, container, 8081)

    def test_rbac_equals_the_contract(self):
        granted = granted_rules(self.objects, FULLNAME, RELEASE_NAMESPACE)
        contract = contract_rules()
        leases = {t for t in contract if t[1] == "leases"}
        self.assertEqual(set(granted), {"cluster", RELEASE_NAMESPACE})
        self.assertEqual(granted["cluster"], contract - leases,
                         f"ClusterRole extra: {granted['cluster'] - (contract - leases)}, "
                         f"missing: {(contract - leases) - granted['cluster']}")
        self.assertEqual(granted[RELEASE_NAMESPACE], leases)

    def test_metrics_service_selects_the_operator_pods(self):
        deployment, container = operator_container(self.objects)
        service = one_object(self.objects, "Service", f"{FULLNAME}-metrics")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        for key, value in service["spec"]["selector"].items():
            self.assertEqual(pod_labels.get(key), value, key)
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"], service["spec"]["selector"])
        (port,) = service["spec"]["ports"]
        self.assertEqual(port["port"], 8080)
        self.assertIn(port["targetPort"], [p["name"] for p in container["ports"]])
        self.assertEqual(objects_of_kind(self.objects, "ServiceMonitor"), [])
        self.assertEqual(objects_of_kind(self.objects, "PodMonitor"), [])  # off by default too

    def test_dashboard_configmap(self):
        configmap = one_object(self.objects, "ConfigMap", f"{FULLNAME}-dashboard")
        self.assertEqual(configmap["metadata"]["labels"]["grafana_dashboard"], "1")
        assert_dashboard_json(self, configmap["data"]["qsync.json"])

    def test_notes_name_the_deployment(self):
        notes = render_notes()
        self.assertIn(f"deployment/{FULLNAME}", notes)
        self.assertIn("every namespace", notes)


class NonDefaultRenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = render_objects(NON_DEFAULT_VALUES)

    def test_deployment_args_match_the_values(self):
        deployment, container = operator_container(self.objects)
        self.assertEqual(container["image"], "registry.example/qsync-operator:1.2.3")
        self.assertEqual(container["imagePullPolicy"], "Always")
        self.assertEqual(parse_args(container["args"]), {
            "--namespace": "ml-team", "--leader-elect": "false",
            "--metrics-port": "9090", "--health-port": "9091", "--workers": "8",
            "--qps": "50", "--burst": "100", "--worker-image": "registry.example/qsync-worker:1.2.3",
            "--gpu-worker-image": "registry.example/qsync-worker-cuda:1.2.3",
            "--gpu-tolerations": '[{"effect":"NoSchedule","key":"dedicated","operator":"Equal","value":"gpu"}]',
            "--gang-scheduler-name": "coscheduler"})
        self.assertEqual(deployment["spec"]["template"]["spec"]["serviceAccountName"], "trainer-operator")
        account = one_object(self.objects, "ServiceAccount", "trainer-operator")
        self.assertEqual(account["metadata"]["annotations"], {"team": "ml"})

    def test_probes_follow_the_health_port(self):
        _, container = operator_container(self.objects)
        assert_probes_on_port(self, container, 9091)

    def test_namespaced_rbac_without_leader_election(self):
        granted = granted_rules(self.objects, "trainer-operator", RELEASE_NAMESPACE)
        contract = contract_rules()
        nodes = {t for t in contract if t[1] in CLUSTER_SCOPED}
        leases = {t for t in contract if t[1] == "leases"}
        self.assertEqual(set(granted), {"cluster", "ml-team"})
        self.assertEqual(granted["cluster"], nodes)
        self.assertEqual(granted["ml-team"], contract - nodes - leases)
        role = one_object(self.objects, "Role", FULLNAME)
        self.assertEqual(role["metadata"]["namespace"], "ml-team")
        self.assertEqual(one_object(self.objects, "ClusterRole")["metadata"]["name"], f"{FULLNAME}-nodes")

    def test_service_monitor(self):
        monitor = one_object(self.objects, "ServiceMonitor", FULLNAME)
        service = one_object(self.objects, "Service", f"{FULLNAME}-metrics")
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus")
        for key, value in monitor["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(service["metadata"]["labels"].get(key), value, key)
        self.assertEqual(monitor["spec"]["namespaceSelector"], {"matchNames": [RELEASE_NAMESPACE]})
        (endpoint,) = monitor["spec"]["endpoints"]
        self.assertEqual(endpoint["interval"], "15s")
        self.assertEqual(endpoint["path"], "/metrics")
        self.assertIn(endpoint["port"], [p["name"] for p in service["spec"]["ports"]])
        self.assertEqual(service["spec"]["ports"][0]["port"], 9090)

    def test_worker_pod_monitor(self):
        monitor = one_object(self.objects, "PodMonitor", f"{FULLNAME}-workers")
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["namespace"], RELEASE_NAMESPACE)
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus")
        # Every worker pod: the operator labels them qsync.dev/job (operator/reconciler/desired_children.h).
        self.assertEqual(monitor["spec"]["selector"], {"matchExpressions": [{"key": "qsync.dev/job", "operator": "Exists"}]})
        self.assertEqual(monitor["spec"]["namespaceSelector"], {"matchNames": ["ml-team"]})  # the watched namespace
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        self.assertEqual(endpoint, {"port": "metrics", "path": "/metrics", "interval": "10s", "honorLabels": True})
        self.assertIn("qsync.dev/rank", monitor["spec"]["podTargetLabels"])

    def test_dashboard_configmap_in_the_grafana_namespace(self):
        configmap = one_object(self.objects, "ConfigMap", f"{FULLNAME}-dashboard")
        self.assertEqual(configmap["metadata"]["namespace"], "monitoring")
        self.assertEqual(configmap["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(configmap["metadata"]["labels"]["team"], "ml")

    def test_lease_in_its_own_namespace_and_release_namespace_watched(self):
        objects = render_objects(LEASE_ELSEWHERE_VALUES)
        _, container = operator_container(objects)
        args = parse_args(container["args"])
        self.assertEqual(args["--namespace"], RELEASE_NAMESPACE)
        self.assertEqual(args["--leader-elect"], "true")
        self.assertEqual(args["--leader-election-namespace"], "qsync-leases")
        granted = granted_rules(objects, FULLNAME, RELEASE_NAMESPACE)
        contract = contract_rules()
        leases = {t for t in contract if t[1] == "leases"}
        nodes = {t for t in contract if t[1] in CLUSTER_SCOPED}
        self.assertEqual(granted["qsync-leases"], leases)
        self.assertEqual(granted[RELEASE_NAMESPACE], contract - leases - nodes)
        self.assertEqual(granted["cluster"], nodes)

    def test_without_rbac_and_service_account(self):
        objects = render_objects({"rbac": {"create": False},
                                  "serviceAccount": {"create": False, "name": "existing"},
                                  "grafana": {"dashboard": {"enabled": False}},
                                  "metrics": {"service": {"enabled": False}}})
        self.assertEqual(sorted(o["kind"] for o in objects), ["Deployment"])
        deployment, _ = operator_container(objects)
        self.assertEqual(deployment["spec"]["template"]["spec"]["serviceAccountName"], "existing")


class ValuesValidationTest(unittest.TestCase):
    def assert_render_refused(self, values, *fragments):
        with self.assertRaises(helm.HelmError) as caught:
            render_objects(values)
        for fragment in fragments:
            self.assertIn(fragment, str(caught.exception))

    def test_schema_refuses_bad_values(self):
        self.assert_render_refused({"workers": "x"}, "workers")
        self.assert_render_refused({"workers": 0}, "workers")
        self.assert_render_refused({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy")
        self.assert_render_refused({"metrics": {"port": 70000}}, "port")
        self.assert_render_refused({"watchNamespace": "Not_A_Namespace"}, "watchNamespace")
        self.assert_render_refused({"rbac": {"namespaced": "yes"}}, "namespaced")
        self.assert_render_refused({"leaderElect": True}, "leaderElect")
        self.assert_render_refused({"workerPods": {"gpuTolerations": [{"operator": "Sometimes"}]}}, "operator")

    def test_schema_accepts_the_defaults_and_the_non_default_values(self):
        with helm.Chart.load(CHART_DIR) as chart:
            chart.validate_schema(chart.merge_values(None))
            chart.validate_schema(chart.merge_values(NON_DEFAULT_VALUES))

    def test_schema_lists_every_default_value(self):
        with helm.Chart.load(CHART_DIR) as chart:
            schema, defaults = chart.schema, chart.values
        self.assertIs(schema["additionalProperties"], False)
        self.assertEqual(sorted(set(defaults) - set(schema["properties"])), [])

    def test_inconsistent_values_fail_with_the_fix(self):
        self.assert_render_refused({"metrics": {"service": {"enabled": False},
                                                "serviceMonitor": {"enabled": True}}},
                                   "metrics.service.enabled")
        self.assert_render_refused({"replicaCount": 2, "leaderElection": {"enabled": False}},
                                   "leaderElection.enabled")
        self.assert_render_refused({"serviceAccount": {"create": False, "name": ""}}, "serviceAccount.name")


def assert_probes_on_port(test, container, port):
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        test.assertEqual(get["path"], path)
        target = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        test.assertEqual(target, port, f"{probe} points at {get['port']}")


def assert_dashboard_json(test, text):
    with open(os.path.join(CHART_DIR, "dashboards", "qsync.json"), encoding="utf-8") as f:
        test.assertEqual(json.loads(text), json.load(f), "the ConfigMap must carry dashboards/qsync.json")
    dashboard = json.loads(text)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    test.assertGreaterEqual(len(panels), 10)
    for panel in panels:
        exprs = [t.get("expr", "").strip() for t in panel.get("targets", [])]
        test.assertTrue(exprs and all(exprs), f"panel {panel['title']!r} needs targets with an expr")


if __name__ == "__main__":
    unittest.main(verbosity=2)
