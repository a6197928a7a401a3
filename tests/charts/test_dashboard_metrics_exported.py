# File: tests/charts/test_dashboard_metrics_exported.py
# The metrics the Grafana dashboard queries are the ones the code exports: each worker metric is
# registered in worker/telemetry.cpp with the job/rank/device_class labels, and each operator
# metric is named in the operator's sources (operator/). Fails, naming the metric, when the
# dashboard and the code drift apart.
import glob
import os
import unittest

from chart_rendering import REPO_ROOT
from dashboard_queries import (OPERATOR_METRICS, WORKER_METRICS, load_dashboard, names_in_expr,
                               panel_targets, series_name)


def read_sources(patterns):
    text = []
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(REPO_ROOT, pattern), recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    return "\n".join(text)


def dashboard_metrics():
    used = set()
    for _, target in panel_targets(load_dashboard()):
        names, _ = names_in_expr(target["expr"])
        used |= {series_name(n) for n in names if series_name(n)}
    return used


class DashboardMetricsExportedTest(unittest.TestCase):
    def test_worker_metrics_are_registered_by_the_worker(self):
        telemetry = read_sources(["worker/telemetry.cpp"])
        for label in ("job", "rank", "device_class"):
            self.assertIn(f'{{"{label}"', telemetry, f"worker/telemetry.cpp no longer labels {label}")
        self.assertIn('"layer"', telemetry)
        self.assertIn('"precision"', telemetry)
        for name in sorted(dashboard_metrics() & set(WORKER_METRICS)):
            self.assertIn(f'"{name}"', telemetry, f"the dashboard queries {name}; worker/telemetry.cpp "
                                                  "does not register it")

    def test_operator_metrics_are_exported_by_the_operator(self):
        sources = read_sources(["operator/**/*.cpp", "operator/**/*.h"])
        missing = sorted(name for name in dashboard_metrics() & set(OPERATOR_METRICS)
                         if f'"{name}"' not in sources)
        self.assertEqual(missing, [], "the dashboard queries these metrics, but no file under operator/ "
                                      "names them (rename the panel query or export the metric)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
