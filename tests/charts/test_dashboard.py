# File: tests/charts/test_dashboard.py
# The Grafana dashboard charts/qsync/dashboards/qsync.json: its structure and variables, that it
# covers what issues 7 and 16 ask for (step time measured vs predicted, samples/s, loss, wait-at-sync
# share, precision mix, memory, restarts, reconcile rate and errors, jobs by phase, planning;
# borrowed GPUs, reclaims and their latency, elastic resizes),
# that every query names only metrics and labels QSync exports, and that every query parses
# (promtool check rules; skipped where the Debian prometheus package is not installed).
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from dashboard_queries import (grafana_expr, labels_of, load_dashboard, names_in_expr,
                               panel_targets, query_panels, series_name)

DATASOURCE = "${datasource}"


class DashboardStructureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dashboard = load_dashboard()

    def test_metadata_and_variables(self):
        self.assertGreaterEqual(self.dashboard["schemaVersion"], 36)
        self.assertTrue(self.dashboard["uid"])
        variables = {v["name"]: v for v in self.dashboard["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        self.assertEqual(variables["job"]["query"]["query"], "label_values(qsync_worker_steps_total, job)")
        self.assertIn("label_values(qsync_worker_steps_total", variables["rank"]["query"]["query"])
        self.assertIn(", rank)", variables["rank"]["query"]["query"])
        for name in ("job", "rank"):
            self.assertTrue(variables[name]["includeAll"])
            self.assertEqual(variables[name]["allValue"], ".*")

    def test_every_panel_queries_prometheus(self):
        ids = [p["id"] for p in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        for panel in query_panels(self.dashboard):
            with self.subTest(panel=panel["title"]):
                self.assertEqual(panel["datasource"]["uid"], DATASOURCE)
                targets = panel.get("targets", [])
                self.assertTrue(targets)
                ref_ids = [t["refId"] for t in targets]
                self.assertEqual(len(ref_ids), len(set(ref_ids)))
                for target in targets:
                    self.assertTrue(target["expr"].strip())
                    self.assertEqual(target["datasource"]["uid"], DATASOURCE)

    def test_worker_panels_filter_by_job_and_rank(self):
        for title, target in panel_targets(self.dashboard):
            names, _ = names_in_expr(target["expr"])
            for name in names:
                if name.startswith("qsync_worker_"):
                    pattern = name + r'\{[^}]*job=~"\$job"[^}]*rank=~"\$rank"'
                    self.assertRegex(target["expr"], pattern, f"panel {title!r}: {name}")

    def test_covers_what_the_issue_asks_for(self):
        exprs = " ".join(t["expr"] for _, t in panel_targets(self.dashboard))
        wanted = {
            "measured step time": r"qsync_worker_step_duration_seconds_(sum|bucket)",
            "predicted step time": r"qsync_worker_predicted_step_seconds",
            "samples/s": r"rate\(qsync_worker_samples_total",
            "loss": r"qsync_worker_loss",
            "wait-at-sync share": r"rate\(qsync_worker_sync_wait_duration_seconds_sum[^/]*/\s*"
                                  r"rate\(qsync_worker_step_duration_seconds_sum",
            "precision mix per rank": r"count by \([^)]*rank[^)]*precision[^)]*\) \(qsync_worker_layer_precision_info",
            "peak memory": r"qsync_worker_peak_memory_bytes",
            "memory budget": r"qsync_worker_memory_budget_bytes",
            "restarts": r"qsync_operator_jobs_restarts_total",
            "reconcile rate": r"rate\(controller_runtime_reconcile_total",
            "reconcile errors": r"controller_runtime_reconcile_errors_total",
            "jobs by phase": r"by \(phase\) \(qsync_operator_jobs\)",
            "planning duration": r"qsync_operator_planning_duration_seconds_bucket",
            "borrowed GPUs": r"qsync_operator_borrowed_devices",
            "whole-job restarts per job": r"max by \(namespace, job\) \(qsync_operator_job_restarts\)",
            "reclaims": r"qsync_operator_reclaims_total",
            "reclaim latency": r"qsync_operator_reclaim_seconds_bucket",
            "resizes": r"qsync_operator_resizes_total",
        }
        for what, pattern in wanted.items():
            self.assertRegex(exprs, pattern, f"no panel shows {what}")


class DashboardQueriesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.targets = panel_targets(load_dashboard())

    def test_queries_name_only_exported_metrics_and_their_labels(self):
        for title, target in self.targets:
            with self.subTest(panel=title, expr=target["expr"]):
                names, grouping = names_in_expr(target["expr"])
                self.assertTrue(names, "the query selects no metric")
                unknown = sorted(n for n in names if series_name(n) is None)
                self.assertEqual(unknown, [], f"not a QSync metric: {unknown}")
                available = labels_of(names)
                self.assertLessEqual(grouping, available, f"grouping labels not on {sorted(names)}")
                legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
                self.assertLessEqual(legend, available | grouping, f"legend labels not on {sorted(names)}")

    def test_query_parser_catches_unknown_metrics(self):
        names, grouping = names_in_expr('sum by (rank, le) (rate(qsync_worker_stepz_bucket{job=~"$job"}[1m]))')
        self.assertEqual(names, {"qsync_worker_stepz_bucket"})
        self.assertEqual(grouping, {"rank", "le"})
        self.assertIsNone(series_name("qsync_worker_stepz_bucket"))
        self.assertIsNone(series_name("qsync_worker_loss_bucket"))
        self.assertEqual(series_name("qsync_worker_step_duration_seconds_count"),
                         "qsync_worker_step_duration_seconds")

    def test_queries_parse_with_promtool(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool (Debian package prometheus, scripts/install-deps.sh) is not installed")
        rules = [{"record": f"qsync:dashboard_query_{i}", "expr": grafana_expr(t["expr"])}
                 for i, (_, t) in enumerate(self.targets)]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "dashboard_rules.yaml")
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump({"groups": [{"name": "qsync-dashboard", "rules": rules}]}, f)
            result = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn(f"{len(rules)} rules found", result.stdout + result.stderr)

            # The same check refuses a broken query, so a pass above means the queries parse.
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump({"groups": [{"name": "broken", "rules": [
                    {"record": "qsync:broken", "expr": "rate(qsync_worker_loss[1m]"}]}]}, f)
            broken = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
            self.assertNotEqual(broken.returncode, 0, broken.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
