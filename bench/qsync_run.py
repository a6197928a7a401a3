"""Runs one generated HybridTrainingJob with build/bin/qsync and returns its summary JSON: the
step the benchmark scripts of this folder share (data_parallel_bench, prediction_error_bench,
time_to_accuracy_bench). A failed run ends the benchmark with the runner's output."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QSYNC = os.path.join(ROOT, "build", "bin", "qsync")


def run_job(name, yaml_text, tmp, work_dir=None, extra_args=()):
    """Writes tmp/NAME.yaml, runs it (work dir: work_dir or tmp/NAME) and returns the summary."""
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(yaml_text)
    summary = os.path.join(tmp, name + ".json")
    proc = subprocess.run([QSYNC, "run", path, "--work-dir", work_dir or os.path.join(tmp, name),
                           "--summary-json", summary, "--quiet", *extra_args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    with open(summary) as f:
        return json.load(f)
