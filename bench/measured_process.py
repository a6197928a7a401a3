#!/usr/bin/python3
"""bench/measured_process.py: a benchmark's child processes (worker_bench.py and its PyTorch side):
each run alone to completion with its own peak RSS, under thread counts pinned for the run."""

import os
import subprocess
import tempfile
import time


def run_measured(cmd, env=None, timeout=None):
    """Runs `cmd` to completion; returns (returncode, stdout, stderr, peak RSS in bytes of that
    process). The RSS comes from os.wait4 on the child itself, so every run is measured alone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                usage.ru_maxrss * 1024)  # Linux reports KiB


def thread_env(threads, openblas_coretype=""):
    """The environment for a child: OpenMP and OpenBLAS thread counts pinned to `threads`, and
    OPENBLAS_CORETYPE when given."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    if openblas_coretype:
        env["OPENBLAS_CORETYPE"] = openblas_coretype
    return env
