#!/usr/bin/python3
"""bench/worker_bench.py: QSync's training worker against PyTorch on the CPU, per zoo model.

What it measures
  For every zoo model (mlp, cnn, vit at batch 128; char-gpt at batch 32 by default, 64-token
  contexts) and T threads (1 by default):

  ours     for each CPU device class (cpu-amx, cpu-avx512, cpu-avx2) that runs on this CPU, and
           each precision (fp32, bf16, int8; --extra adds int8-all and fp8), one process of
             qsync-worker train --model M --precision P --device-class C --threads T --batch B
                            --steps W+S --eval-limit 10 --quiet --summary-json F
                            [--log-json --log-every 1]
           recording the median step time of the last S steps (from the per-step JSON lines; a
           worker without --log-json gives only its median over all W+S steps, which is used
           then), peak_memory_bytes (the worker's accounted tensor bytes) and the process's peak
           RSS. A class the CPU lacks (cpu-amx on a CPU without AMX) is not run: the worker
           refuses it and names the class it would fall back to, which is a row of its own.
  PyTorch  the same model built by tools/torch_models.py, the same batch, random inputs of the
           right shape (token ids for char-gpt), cross-entropy, AdamW (lr 1e-3, no weight decay,
           as the worker's defaults), torch.set_num_threads(T) (and OMP/OpenBLAS thread counts of
           T: Debian's torch does FP32 GEMMs in OpenBLAS), in FP32 and with BF16 autocast
           (torch.autocast('cpu', dtype=torch.bfloat16)); W warm-up steps, then the median of S
           timed steps; each configuration in its own process, for its peak RSS.
           FP32 also once per class of ours below cpu-amx, with torch capped at the class's ISA
           (torch_baseline.TORCH_ISA_CAPS: ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
           MKL_ENABLE_INSTRUCTIONS, OPENBLAS_CORETYPE): our classes cap oneDNN and our own loops,
           so an uncapped torch on an AVX-512 CPU against our cpu-avx2 class compares vector units,
           not engines. A class's fp32 row's ours/torch is against that capped run; the uncapped
           ratio is beside it.
           OpenBLAS: it picks its kernels from the CPU model, and on a virtual CPU that reports a
           generic model ("Intel Xeon Processor") it falls back to Prescott (SSE3) kernels, about
           6x slower than its AVX-512 ones. By default (--openblas-coretype auto) the PyTorch
           children get OPENBLAS_CORETYPE from /proc/cpuinfo (Cooperlake with avx512_bf16,
           SkylakeX with avx512f, Haswell with avx2), so torch's FP32 is at its best here;
           --openblas-coretype none measures torch as installed. The core OpenBLAS used is
           recorded (torch.openblas_core in the JSON).
  A step is the same work on both sides: zero grads, forward, loss, backward, optimizer step
  (the input batch is ready before the clock starts).

  Memory: "accounted" is the worker's own tensor accounting (weights, gradients, optimizer
  state, activations, workspaces). RSS is the whole process: for the worker it includes the
  shared libraries (about 215 MiB for a CUDA-enabled build, which loads the CUDA runtime and
  cuBLASLt even on the CPU; `qsync-worker --help` alone peaks there) and the training set it
  loads (Fashion-MNIST as floats, ~190 MiB); for PyTorch, the torch library (~235 MiB, recorded
  as the RSS before the first step).

  BF16: the comparison with torch's BF16 autocast uses our bf16 on the class where BF16 is
  native (cpu-amx: oneDNN uncapped). On a CPU without AMX no class of ours runs BF16 natively:
  cpu-avx512 caps oneDNN at AVX-512 VNNI, without the BF16 instructions, and our GEMM backend
  then decodes BF16 to FP32 (exact) and runs the FP32 kernel. The comparison then uses the
  strongest available class, and the output says so. PyTorch's oneDNN is not capped, so its
  BF16 is native wherever the CPU has avx512_bf16.

How to run: the PyTorch side runs in this interpreter (sys.executable), so the interpreter picks
the torch: Debian's python3-torch 1.13 (/usr/bin/python3; FP32 GEMMs in OpenBLAS), or PyPI's
current wheel in a virtual environment (a CUDA build, MKL for FP32 GEMMs on the CPU):
  /usr/bin/python3 -m venv /tmp/torch-pypi && /tmp/torch-pypi/bin/pip install torch pyyaml
  /tmp/torch-pypi/bin/python bench/worker_bench.py --repeats 3
The notes and the JSON (torch_version, torch_blas) say which ran.
  /usr/bin/python3 bench/worker_bench.py                 # full: ~3 minutes at 1 thread
  /usr/bin/python3 bench/worker_bench.py --repeats 3     # median of 3 (rounds interleaved): ~8 minutes
  /usr/bin/python3 bench/worker_bench.py --quick         # smoke test: mlp + cnn, few steps
  /usr/bin/python3 bench/worker_bench.py --threads 2 --models cnn,vit --json /tmp/b.json
  /usr/bin/python3 bench/worker_bench.py --op-times      # plus a per-op breakdown of each of our runs
Options: see --help. Results go to --json (default build/results/worker_bench.json). Timings
are noisy on a shared machine: the load average before and after the run is recorded; use
--repeats N to keep the median of N interleaved runs' medians per configuration.
This is a benchmark, not a test: it asserts nothing about speed.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from measured_process import run_measured, thread_env
from torch_baseline import TORCH_ISA_CAPS, openblas_coretype_for, torch_run
from worker_bench_table import MIB, fmt_ms, render_notes, render_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = ["mlp", "cnn", "vit", "char-gpt"]
CLASSES = ["cpu-amx", "cpu-avx512-bf16", "cpu-avx512", "cpu-avx2"]
PRECISIONS = ["fp32", "bf16", "int8"]
EXTRA_PRECISIONS = ["int8-all", "fp8"]
# The /proc/cpuinfo flags each class needs (kernels/device_class.cpp, kernels/cpu_isa.h).
CLASS_FLAGS = {"cpu-amx": ["amx_tile", "avx512_bf16", "avx512_vnni"],
               "cpu-avx512-bf16": ["avx512f", "avx512_vnni", "avx512_bf16"], "cpu-avx512": ["avx512f", "avx512_vnni"],
               "cpu-avx2": ["avx2"]}
# The classes whose BF16 GEMMs are native, strongest first (cpu-amx: oneDNN uncapped; cpu-avx512-bf16:
# capped at avx512_core_bf16); the others emulate BF16.
BF16_NATIVE_CLASSES = ["cpu-amx", "cpu-avx512-bf16"]


# ------------------------------------------------------------------------------------------------
# Processes


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty set when unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def file_sha256(path):
    """The SHA-256 of a file (to tell which worker build was measured)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_average():
    """(1, 5, 15)-minute load averages, or None."""
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------
# Ours


def worker_has_log_json(worker):
    """Whether this worker build logs per-step JSON (--log-json), which gives per-step times."""
    try:
        usage = subprocess.run([worker, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--log-json" in usage


def worker_run(args, model, cls, precision, batch, op_times=False):
    """One qsync-worker training run of W + S steps. Returns a result dict; 'status' is 'ok',
    'unavailable' (the class does not run on this CPU; 'note' says why and what it would fall back
    to) or 'error'. With per-step JSON (args.log_json), median_step_seconds is the median of the
    last S steps (the first W are warm-up, as on the PyTorch side), and median_compute_seconds the
    same for zero_grad + forward + loss + backward (the rest of a step is the optimizer);
    otherwise it is the worker's own median over all W + S steps."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [args.worker, "train", "--model", model, "--precision", precision, "--device-class", cls,
               "--threads", str(args.threads), "--batch", str(batch), "--steps", str(args.warmup + args.steps),
               "--eval-limit", "10", "--summary-json", summary]
        if model == "char-gpt":
            cmd += ["--data", args.data]
        elif args.image_data:
            cmd += ["--data", args.image_data]
        if op_times:  # the per-op table lands in the summary JSON
            cmd += ["--op-times", "--quiet"]
        elif args.log_json:
            cmd += ["--quiet", "--log-json", "--log-every", "1"]
        else:
            cmd.append("--quiet")
        rc, out, err, rss = run_measured(cmd, env=thread_env(args.threads), timeout=args.timeout)
        text = (out + err).strip()
        if rc != 0:
            status = "unavailable" if "cannot run as" in text else "error"
            return {"status": status, "note": text.splitlines()[-1] if text else "exit %d" % rc, "command": cmd}
        with open(summary) as f:
            s = json.load(f)
    r = {"status": "ok", "command": cmd, "device_class_run": s.get("device_class"),
         "median_step_seconds": s["median_step_seconds"], "worker_median_step_seconds": s["median_step_seconds"],
         "median_compute_seconds": s.get("median_compute_seconds"), "timed_steps": "all",
         "peak_memory_bytes": s["peak_memory_bytes"], "peak_rss_bytes": rss,
         "steady_minor_page_faults_per_step": s.get("steady_minor_page_faults_per_step"),
         "final_train_loss": s.get("final_train_loss"), "plan": s.get("plan"), "steps": s.get("steps")}
    if op_times:  # {op: {ms_per_step, calls_per_step}} over the steps after the run's first
        r["op_times"] = s.get("op_times")
        r["op_time_steps"] = s.get("op_time_steps")
        return r
    steps = []
    for line in out.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "step":
            steps.append(event)
    timed = steps[args.warmup:]
    if timed and all("step_seconds" in e and "compute_seconds" in e for e in timed):
        r["step_seconds"] = [e["step_seconds"] for e in timed]
        r["median_step_seconds"] = statistics.median(r["step_seconds"])
        r["median_compute_seconds"] = statistics.median(e["compute_seconds"] for e in timed)
        r["timed_steps"] = "after %d warm-up" % args.warmup
    return r


def median_of(runs):
    """The run whose median step is the median of the successful runs' (the lower middle one for
    an even count), with every run's median kept (or the first failure)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return runs[0]
    ordered = sorted(ok, key=lambda r: r["median_step_seconds"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    mid["repeat_medians"] = [r["median_step_seconds"] for r in ok]
    mid["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok)
    return mid


# ------------------------------------------------------------------------------------------------
# Main


def class_availability(args, flags):
    """For each requested class: available or not (asks the worker with a 1-step mlp run, and
    cross-checks /proc/cpuinfo), with the fallback the worker names."""
    status = {}
    for cls in args.classes:
        missing = [f for f in CLASS_FLAGS.get(cls, []) if f not in flags]
        r = worker_run(argparse.Namespace(**{**vars(args), "steps": 1, "warmup": 0}), "mlp", cls, "fp32", 8)
        if r["status"] == "ok":
            status[cls] = {"status": "available", "cpu_flags_missing": missing}
        else:
            note = r["note"]
            fallback = note.rsplit("closest class here is ", 1)[-1].strip() if "closest class" in note else "?"
            status[cls] = {"status": r["status"], "note": note, "fallback": fallback, "cpu_flags_missing": missing}
    return status


def bf16_comparison(class_status, flags, classes):
    """The class of ours to compare with torch's BF16 autocast, and a sentence saying why."""
    torch_native = "avx512_bf16" in flags or "amx_bf16" in flags
    torch_side = ("PyTorch's oneDNN is uncapped and this CPU has avx512_bf16, so torch's BF16 is native"
                  if torch_native else "this CPU lacks avx512_bf16, so torch's BF16 is emulated too")
    available = [c for c in classes if class_status[c]["status"] == "available"]
    for native in BF16_NATIVE_CLASSES:
        if native in available:
            return native, "ours on %s, where BF16 is native; %s." % (native, torch_side)
    if not available:
        return None, "no class of ours ran."
    strongest = available[0]  # CLASSES is ordered strongest first
    return strongest, ("no class of ours runs BF16 natively on this CPU (%s needs AMX; %s caps oneDNN at AVX-512 "
                       "VNNI, without BF16 instructions, so our bf16 GEMMs are decoded to FP32 and run the FP32 "
                       "kernel); ours on the strongest available class, %s, is used; %s." % (
                           "/".join(BF16_NATIVE_CLASSES), "cpu-avx512", strongest, torch_side))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", default=os.path.join(REPO, "build", "bin", "qsync-worker"))
    p.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: all four)")
    p.add_argument("--classes", default=",".join(CLASSES))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--extra", action="store_true", help="also int8-all and fp8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128, help="batch of the image models")
    p.add_argument("--gpt-batch", type=int, default=32, help="batch of char-gpt (64-token contexts)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run (after --warmup)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (both sides)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per configuration, in interleaved rounds; the median of their medians is kept")
    p.add_argument("--data", default="/usr/share/common-licenses/GPL-3", help="text file for char-gpt")
    p.add_argument("--image-data", default="", help="Fashion-MNIST dir (default: the worker's default)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    p.add_argument("--openblas-coretype", default="auto",
                   help="OPENBLAS_CORETYPE for the PyTorch children: auto (from /proc/cpuinfo), none "
                        "(OpenBLAS's own detection), or a core name such as SkylakeX")
    p.add_argument("--op-times", action="store_true",
                   help="also run each of our configurations once with --op-times and keep the breakdown")
    p.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    p.add_argument("--quick", action="store_true", help="smoke test: mlp and cnn, 4 steps, 1 warm-up")
    p.add_argument("--json", default=os.path.join(REPO, "build", "results", "worker_bench.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.models, a.steps, a.warmup = "mlp,cnn", min(a.steps, 4), min(a.warmup, 1)
    a.models = [m for m in a.models.split(",") if m]
    a.classes = [c for c in a.classes.split(",") if c]
    a.precisions = [q for q in a.precisions.split(",") if q] + (EXTRA_PRECISIONS if a.extra else [])
    return a


def main(argv):
    args = parse_args(argv)
    if not os.access(args.worker, os.X_OK):
        sys.exit("worker_bench: no worker binary at %s (build it: ninja -C build qsync-worker)" % args.worker)
    if "char-gpt" in args.models and not os.path.isfile(args.data):
        sys.exit("worker_bench: char-gpt needs a text file: --data FILE (%s is missing)" % args.data)

    flags = cpu_flags()
    args.log_json = worker_has_log_json(args.worker)
    if args.openblas_coretype == "auto":
        args.openblas_core = openblas_coretype_for(flags)
    else:
        args.openblas_core = "" if args.openblas_coretype == "none" else args.openblas_coretype
    results = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
               "cpu_flags": sorted(f for f in flags if f.startswith(("avx", "amx"))),
               "load_before": load_average(), "threads": args.threads, "steps": args.steps,
               "torch_warmup": args.warmup, "repeats": args.repeats, "worker": args.worker,
               "worker_sha256": file_sha256(args.worker),
               "worker_mtime": datetime.datetime.fromtimestamp(os.path.getmtime(args.worker)).isoformat(timespec="seconds"),
               "openblas_coretype": args.openblas_core or "(OpenBLAS's own detection)",
               "ours_timing": ("median of the %d steps after %d warm-up steps (per-step --log-json)"
                               % (args.steps, args.warmup) if args.log_json else
                               "the worker's median over all %d steps (this build has no --log-json)"
                               % (args.steps + args.warmup)),
               "classes": args.classes, "precisions": args.precisions, "models": []}
    print("load average before: %s" % results["load_before"], flush=True)
    results["class_status"] = class_availability(args, flags)
    cmp_class, cmp_note = bf16_comparison(results["class_status"], flags, args.classes)
    results["bf16_comparison_class"], results["bf16_comparison_note"] = cmp_class, cmp_note
    for cls, st in results["class_status"].items():
        print("%-11s %s" % (cls, st["status"] if st["status"] == "available" else st["note"]), flush=True)

    # Every configuration once per round; repeats are rounds, so a burst of load from elsewhere
    # hits different configurations in different rounds, and the median of each is kept.
    configs = []  # (model, batch, side, class or None, precision or torch mode)
    for model in args.models:
        batch = args.gpt_batch if model == "char-gpt" else args.batch
        for cls in args.classes:
            if results["class_status"][cls]["status"] == "available":
                configs += [(model, batch, "ours", cls, prec) for prec in args.precisions]
        if not args.no_torch:
            configs += [(model, batch, "torch", None, mode) for mode in ("fp32", "bf16-autocast")]
            configs += [(model, batch, "torch", cls, "fp32") for cls in args.classes
                        if cls in TORCH_ISA_CAPS and results["class_status"][cls]["status"] == "available"]
    runs = {c: [] for c in configs}
    for rnd in range(args.repeats):
        for c in configs:
            model, batch, side, cls, prec = c
            if side == "ours":
                r = worker_run(args, model, cls, prec, batch)
            else:  # cls: the class whose ISA caps torch, or None
                r = torch_run(args, model, prec, batch, cap_class=cls)
            runs[c].append(r)
            where = cls if side == "ours" else ("capped " + cls if cls else "")
            print("[%d/%d] %-5s %-9s %-22s %-13s %8s ms   load %.2f%s" % (
                rnd + 1, args.repeats, side, model, where, prec, fmt_ms(r), os.getloadavg()[0],
                "" if r["status"] == "ok" else "  " + r["note"]), flush=True)

    baselines = []
    for model in args.models:
        batch = args.gpt_batch if model == "char-gpt" else args.batch
        entry = {"model": model, "batch": batch, "ours": {}, "torch": {}, "torch_capped": {}}
        for (m, _, side, cls, prec), rs in runs.items():
            if m != model:
                continue
            r = median_of(rs)
            if side == "torch":
                if cls is None:
                    entry["torch"][prec] = r
                else:  # fp32 capped at the class's ISA
                    entry["torch_capped"][cls] = r
                if r.get("status") == "ok" and r.get("rss_before_bytes"):
                    baselines.append(r["rss_before_bytes"])
                continue
            if args.op_times and r.get("status") == "ok":
                with_ops = worker_run(args, model, cls, prec, batch, op_times=True)
                r["op_times"] = with_ops.get("op_times")
                r["op_time_steps"] = with_ops.get("op_time_steps")
            entry["ours"].setdefault(cls, {})[prec] = r
        results["models"].append(entry)

    results["load_after"] = load_average()
    cores = {t.get("openblas_core") for m in results["models"] for t in m["torch"].values() if t.get("status") == "ok"}
    capped = {}  # class -> the ATen ISAs its capped runs reported
    for m in results["models"]:
        for cls, t in m["torch_capped"].items():
            if t.get("status") == "ok":
                capped.setdefault(cls, set()).add(str(t.get("cpu_capability")))
    results["torch_capped_cpu_capability"] = {cls: ",".join(sorted(v)) for cls, v in capped.items()}
    results["torch_openblas_core"] = ",".join(sorted(str(c) for c in cores)) or "?"
    for key, field in (("torch_version", "torch_version"), ("torch_blas", "torch_blas")):
        seen = {t.get(field) for m in results["models"] for t in m["torch"].values() if t.get("status") == "ok"}
        results[key] = ",".join(sorted(str(v) for v in seen)) or "?"
    if baselines:
        results["torch_baseline_rss_mib"] = "%.0f" % (min(baselines) / MIB)
    table, notes = render_table(results), render_notes(results)
    results["table"], results["notes"] = table, notes
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print()
    print(table)
    print()
    print(notes)
    print("load average before %s, after %s; results in %s" % (results["load_before"], results["load_after"], args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
