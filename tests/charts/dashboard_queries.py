# File: tests/charts/dashboard_queries.py
# Reads the Grafana dashboard charts/qsync/dashboards/qsync.json: its panels' PromQL targets, and
# what each expression names (metric names, grouping labels), with the metrics QSync exports and
# their labels: the worker's (worker/telemetry.cpp) and the operator's (operator/).
import json
import os
import re

from chart_rendering import CHART_DIR

DASHBOARD_PATH = os.path.join(CHART_DIR, "dashboards", "qsync.json")

WORKER_LABELS = {"job", "rank", "device_class"}
HISTOGRAM = "histogram"

# metric name -> (type, labels). Histograms also carry le on _bucket.
WORKER_METRICS = {
    "qsync_worker_step_duration_seconds": (HISTOGRAM, WORKER_LABELS),
    "qsync_worker_compute_duration_seconds": (HISTOGRAM, WORKER_LABELS),
    "qsync_worker_sync_wait_duration_seconds": (HISTOGRAM, WORKER_LABELS),
    "qsync_worker_allreduce_duration_seconds": (HISTOGRAM, WORKER_LABELS),
    "qsync_worker_loss": ("gauge", WORKER_LABELS),
    "qsync_worker_samples_total": ("counter", WORKER_LABELS),
    "qsync_worker_steps_total": ("counter", WORKER_LABELS),
    "qsync_worker_peak_memory_bytes": ("gauge", WORKER_LABELS),
    "qsync_worker_memory_budget_bytes": ("gauge", WORKER_LABELS),
    "qsync_worker_predicted_step_seconds": ("gauge", WORKER_LABELS),
    "qsync_worker_test_accuracy": ("gauge", WORKER_LABELS),
    "qsync_worker_local_batch": ("gauge", WORKER_LABELS),
    "qsync_worker_layer_precision_info": ("gauge", WORKER_LABELS | {"layer", "precision"}),
}
OPERATOR_METRICS = {
    "controller_runtime_reconcile_total": ("counter", {"controller", "result"}),
    "controller_runtime_reconcile_errors_total": ("counter", {"controller"}),
    "controller_runtime_reconcile_time_seconds": (HISTOGRAM, {"controller"}),
    "workqueue_depth": ("gauge", {"name"}),
    "leader_election_master_status": ("gauge", {"name"}),
    "rest_client_requests_total": ("counter", {"verb", "code"}),
    "qsync_operator_jobs_created_total": ("counter", set()),
    "qsync_operator_jobs_succeeded_total": ("counter", set()),
    "qsync_operator_jobs_failed_total": ("counter", set()),
    "qsync_operator_jobs_restarts_total": ("counter", set()),
    "qsync_operator_jobs": ("gauge", {"phase"}),
    "qsync_operator_planning_duration_seconds": (HISTOGRAM, set()),
    "qsync_operator_borrowed_devices": ("gauge", {"namespace", "job"}),
    "qsync_operator_job_restarts": ("gauge", {"namespace", "job"}),
    "qsync_operator_reclaims_total": ("counter", {"reason", "result"}),
    "qsync_operator_reclaim_seconds": (HISTOGRAM, set()),
    "qsync_operator_resizes_total": ("counter", {"reason"}),
}
KNOWN_METRICS = {**WORKER_METRICS, **OPERATOR_METRICS}

PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "inf", "nan"}


def load_dashboard():
    with open(DASHBOARD_PATH, encoding="utf-8") as f:
        return json.load(f)


def query_panels(dashboard):
    """Every panel that draws data (rows aside), nested rows included."""
    panels = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            panels.extend(panel.get("panels", []))
        else:
            panels.append(panel)
    return panels


def panel_targets(dashboard):
    """(panel title, target) for every target of every panel."""
    return [(p["title"], t) for p in query_panels(dashboard) for t in p.get("targets", [])]


def series_name(name):
    """The exported metric a series name belongs to (a histogram's _bucket/_sum/_count included),
    or None when QSync exports no such metric."""
    if name in KNOWN_METRICS and KNOWN_METRICS[name][0] != HISTOGRAM:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)] if name.endswith(suffix) else None
        if base in KNOWN_METRICS and KNOWN_METRICS[base][0] == HISTOGRAM:
            return base
    return None


def names_in_expr(expr):
    """The series names a PromQL expression selects, and the labels of its by(...) clauses."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    grouping = set()
    for match in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text):
        grouping.update(label.strip() for label in match.group(2).split(",") if label.strip())
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text):
        word = match.group(1)
        if word.lower() not in PROMQL_KEYWORDS:
            names.add(word)
    return names, grouping


def labels_of(series_names):
    """Every label the given series carry (histogram buckets add le)."""
    labels = set()
    for name in series_names:
        base = series_name(name)
        if base is None:
            continue
        labels |= KNOWN_METRICS[base][1]
        if name.endswith("_bucket"):
            labels.add("le")
    return labels


def grafana_expr(expr):
    """An expression as Grafana sends it with every variable at "All" (allValue .*)."""
    return expr.replace("$job", ".*").replace("$rank", ".*")
