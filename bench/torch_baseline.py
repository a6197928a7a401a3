#!/usr/bin/python3
"""bench/torch_baseline.py: worker_bench.py's PyTorch side. Each configuration trains in a child
process of its own (this file run as a script), for its own peak RSS:

    python bench/torch_baseline.py MODEL MODE --batch B --steps S --warmup W --threads T

MODEL is a zoo model built by tools/torch_models.py, MODE fp32 or bf16-autocast; it prints one
JSON line (median_step_seconds, step_seconds, rss_before_bytes, torch_version, torch_blas,
cpu_capability, ...). The interpreter that runs it picks the torch (see worker_bench.py's "How to
run"). A child may run capped at the ISA of one of our CPU classes (TORCH_ISA_CAPS), so that the
class's FP32 row meets a PyTorch with the same vector units."""

import argparse
import json
import os
import re
import statistics
import sys
import time

from measured_process import run_measured, thread_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def openblas_coretype_for(flags):
    """The OpenBLAS core for this CPU's flags (what OpenBLAS would pick on a CPU that reported its
    real model), or "" to leave OpenBLAS's own detection."""
    if "avx512_bf16" in flags:
        return "Cooperlake"
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return ""


# The environment that caps PyTorch at the ISA one of our CPU classes is capped at
# (kernels/device_class.cpp): ATEN_CPU_CAPABILITY caps ATen's own vectorized kernels (elementwise,
# softmax, pooling, norms), ONEDNN_MAX_CPU_ISA (DNNL_ for older builds) oneDNN's (convolutions,
# BF16 matmuls), MKL_ENABLE_INSTRUCTIONS MKL's GEMMs (PyPI wheels) and OPENBLAS_CORETYPE
# OpenBLAS's (Debian's torch). cpu-amx is uncapped on both sides, so it has no entry. Only classes
# that run on this CPU are asked for, so every core named here is one the CPU has.
TORCH_ISA_CAPS = {
    "cpu-avx512-bf16": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "Cooperlake"},
    "cpu-avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX"},
    "cpu-avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                 "OPENBLAS_CORETYPE": "Haswell"},
}


def torch_isa_cap_env(cls):
    """The environment variables that cap a PyTorch child at class `cls`'s ISA ({} for none)."""
    env = dict(TORCH_ISA_CAPS.get(cls, {}))
    if "ONEDNN_MAX_CPU_ISA" in env:
        env["DNNL_MAX_CPU_ISA"] = env["ONEDNN_MAX_CPU_ISA"]
    return env


def torch_blas_note(results):
    """Which torch ran and where its FP32 GEMMs ran."""
    version, blas = results.get("torch_version", "?"), results.get("torch_blas", "?")
    if blas == "mkl":
        gemms = "Intel MKL (a PyPI wheel)"
    else:
        gemms = "OpenBLAS, core %s (OPENBLAS_CORETYPE %s)" % (results.get("torch_openblas_core", "?"),
                                                             results["openblas_coretype"])
    return "torch %s (%s): FP32 GEMMs in %s; BF16 autocast runs oneDNN." % (version, sys.executable, gemms)


def read_status_kib(field):
    """A field of /proc/self/status (VmRSS, VmHWM) in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def torch_child(model_name, mode, batch, steps, warmup, threads):
    """Runs in the child process: trains `model_name` on a fixed random batch and prints one JSON
    line {median_step_seconds, step_seconds, rss_before_bytes, ...}. mode: fp32 or bf16-autocast."""
    import torch  # only here: the parent needs no torch

    sys.path.insert(0, os.path.join(REPO, "tools"))
    import torch_models

    torch.manual_seed(1)
    torch.set_num_threads(threads)
    module, _ = torch_models.build_torch_model(model_name)
    module.train()
    if module.input_kind == "tokens":
        x = torch.randint(0, module.vocab, (batch, module.input_shape[0]))
        y = torch.randint(0, module.vocab, (batch, module.input_shape[0]))
    else:
        x = torch.randn(batch, *module.input_shape)
        y = torch.randint(0, module.classes, (batch,))
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
    rss_before = read_status_kib("VmRSS")

    def step(t0):
        """One training step; returns (loss, seconds before the optimizer step)."""
        opt.zero_grad(set_to_none=True)
        if mode == "bf16-autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = module(x)
            loss = torch_models.cross_entropy(logits.float(), y)
        else:
            loss = torch_models.cross_entropy(module(x), y)
        loss.backward()
        t_compute = time.perf_counter() - t0
        opt.step()
        return loss, t_compute

    # The BLAS of this torch build: Debian's reports "generic" (its FP32 GEMMs run in the system
    # OpenBLAS), PyPI's wheels "mkl" (Intel MKL, linked in).
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = blas.group(1) if blas else "?"
    openblas_core = None
    if blas != "mkl":
        try:  # which kernels OpenBLAS runs
            import ctypes
            lib = ctypes.CDLL("libopenblas.so.0")
            lib.openblas_get_corename.restype = ctypes.c_char_p
            openblas_core = lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            pass

    # ATen's vector ISA as this process runs it (ATEN_CPU_CAPABILITY caps it); torch 1.13 cannot say.
    cpu_capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)()

    times, compute = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss, t_compute = step(t0)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
            compute.append(t_compute)
    print(json.dumps({"median_step_seconds": statistics.median(times), "step_seconds": times,
                      "median_compute_seconds": statistics.median(compute),
                      "rss_before_bytes": rss_before, "peak_rss_self_bytes": read_status_kib("VmHWM"),
                      "final_loss": float(loss), "torch_version": torch.__version__,
                      "torch_threads": torch.get_num_threads(), "openblas_core": openblas_core, "torch_blas": blas,
                      "cpu_capability": cpu_capability,
                      "parameters": sum(p.numel() for p in module.parameters())}))


def torch_run(args, model, mode, batch, cap_class=None):
    """One PyTorch configuration in its own process, uncapped or capped at `cap_class`'s ISA
    (TORCH_ISA_CAPS); returns a result dict."""
    cmd = [sys.executable, os.path.abspath(__file__), model, mode, "--batch", str(batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    env = thread_env(args.threads, args.openblas_core)
    cap = torch_isa_cap_env(cap_class)
    env.update(cap)
    rc, out, err, rss = run_measured(cmd, env=env, timeout=args.timeout)
    if rc != 0:
        lines = (out + err).strip().splitlines()
        return {"status": "error", "note": lines[-1] if lines else "exit %d" % rc, "command": cmd}
    r = json.loads(out.strip().splitlines()[-1])
    r.update({"status": "ok", "peak_rss_bytes": rss, "command": cmd, "isa_cap_class": cap_class, "isa_cap_env": cap})
    return r


def main(argv):
    p = argparse.ArgumentParser(description="One PyTorch training configuration of worker_bench.py (a child process).")
    p.add_argument("model")
    p.add_argument("mode", choices=["fp32", "bf16-autocast"])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    a = p.parse_args(argv)
    torch_child(a.model, a.mode, a.batch, a.steps, a.warmup, a.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
