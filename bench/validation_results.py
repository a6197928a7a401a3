#!/usr/bin/env python3
"""Regenerates docs/results.md, QSync's validation tables, by running the three benchmarks behind
them on this machine (not a test; hours in full, minutes with --quick):

    bench/validation_results.py [--quick] [--only prediction,tta,spd] [--tta-models cnn,vit,char-gpt]
                                [--out docs/results.md]

  1. prediction error of the replayer on held-out plans and batches (prediction_error_bench.py);
  2. time to accuracy and final quality on the local hybrid pool (time_to_accuracy_bench.py);
  3. Sync-Point Drop judged on the real collective (spd_bench.py; --veth when run as root with
     `ip netns`, so a veth pair between two network namespaces is measured beside loopback).
Each section quotes the date, the machine (CPU model, the instruction sets QSync's classes use,
cores, load average before and after) and the exact command, then the benchmark's own tables
verbatim. --quick runs a smoke configuration of each (labelled as such in the page): fewer models,
rounds, seeds and steps; its numbers are not the validation. Time to accuracy runs model by
model: --tta-models reruns only the models it names and keeps the page's runs of the others (each
run with its own date, machine and command; the title names models that no run covers).
Build first: ./scripts/build.sh --target qsync --target qsync-worker --target qsync-plan
             --target qsync-bench-allreduce
"""
import argparse
import datetime
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
TTA_MODELS = "cnn,vit,char-gpt"
FULL = {
    "prediction": ["prediction_error_bench.py", "--rounds", "3"],
    "tta": ["time_to_accuracy_bench.py", "--models", TTA_MODELS, "--seeds", "1,2,3"],
    "spd": ["spd_bench.py", "--tp", "2,4", "--rounds", "3"],
}
QUICK = {
    "prediction": ["prediction_error_bench.py", "--models", "mlp,cnn", "--rounds", "2"],
    "tta": ["time_to_accuracy_bench.py", "--models", "cnn", "--seeds", "1,2", "--steps", "60",
            "--strategies", "exact,uniform,weak-int8-all"],
    "spd": ["spd_bench.py", "--tp", "2", "--rounds", "2", "--repeat", "3", "--train-steps", "300",
            "--work", "/tmp/qsync-spd-quick"],
}
TITLES = {
    "prediction": "Prediction error on held-out plans and batches",
    "tta": "Time to accuracy and final quality on the local hybrid pool",
    "spd": "Sync-Point Drop on the real collective",
}


def machine():
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("sse4_1", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} CPUs ({', '.join(isa)}), {platform.system()} {platform.release()}"


def load():
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


RUN_MARK = "<!-- time-to-accuracy run: "  # opens one run's block inside the tta section


def run_section(key, args, quick):
    cmd = [sys.executable, os.path.join(BENCH, args[0]), *args[1:]]
    if key == "spd" and os.geteuid() == 0 and subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0:
        cmd += ["--veth", "--veth-delay", "50us"]
    before = load()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"[{key}] {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    body = proc.stdout if proc.returncode == 0 else f"FAILED (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    shown = " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:])
    head = [f"- date: {started:%Y-%m-%d %H:%M} UTC, {minutes:.0f} min", f"- machine: {machine()}",
            f"- load average (1/5/15 min) before: {before}, after: {load()}", f"- command: `python3 {shown}`", ""]
    lines = [l for l in body.splitlines() if not l.startswith(("round ", "profiled ", "training ", "wrote "))]
    return "\n".join(head + lines) + "\n", proc.returncode


def section_title(key, quick, models_run=()):
    label = " (quick smoke run: not the validation)" if quick else ""
    if key == "tta" and not quick:
        left = [m for m in TTA_MODELS.split(",") if m not in models_run]
        label = f" ({', '.join(left)} not run)" if left else ""
    return f"## {TITLES[key]}{label}\n\n"


def tta_runs(section):
    """The runs of a tta section, as (models, text) in page order."""
    runs = []
    for line in section.splitlines(keepends=True):
        if line.startswith(RUN_MARK):
            runs.append([line[len(RUN_MARK):].split(" ")[0].split(","), line])
        elif runs:
            runs[-1][1] += line
    return runs


def tta_section(previous, models, text, quick):
    """The tta section after a run of `models`: the previous page's runs of other models are kept
    (a quick run replaces everything: smoke numbers never sit beside the validation's)."""
    kept = [] if quick else [(m, t) for m, t in tta_runs(previous) if not set(m) & set(models)]
    runs = kept + [(models, f"{RUN_MARK}{','.join(models)} -->\n{text}")]
    covered = [m for ms, _ in runs for m in ms]
    return section_title("tta", quick, covered) + "\n".join(t.rstrip("\n") + "\n" for _, t in runs)


def previous_sections(path):
    """The sections of an existing page, by key, so --only replaces just the ones it reruns."""
    sections, key = {}, None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                titled = next((k for k, t in TITLES.items() if line.startswith("## " + t)), None)
                if titled:  # a benchmark's own "## model: ..." headings stay inside their section
                    key, sections[titled] = titled, ""
                if key:
                    sections[key] += line
    return sections


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke configuration of every benchmark")
    ap.add_argument("--only", default="prediction,tta,spd")
    ap.add_argument("--tta-models", default="", help="time to accuracy on these models only, keeping "
                    "the page's runs of the others; default: cnn,vit,char-gpt")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results.md"))
    args = ap.parse_args()
    keys = args.only.split(",")
    unknown = [k for k in keys if k not in FULL]
    if unknown:
        sys.exit(f"--only: unknown section(s) {unknown}; choose from {list(FULL)}")
    for b in ("qsync", "qsync-worker", "qsync-plan", "qsync-bench-allreduce"):
        if not os.access(os.path.join(ROOT, "build", "bin", b), os.X_OK):
            sys.exit(f"build/bin/{b} is missing: build first (see --help)")
    if args.tta_models:
        unknown = [m for m in args.tta_models.split(",") if m not in TTA_MODELS.split(",")]
        if unknown:
            sys.exit(f"--tta-models: unknown model(s) {unknown}; choose from {TTA_MODELS}")
        FULL["tta"][2] = QUICK["tta"][2] = args.tta_models
    sections, failed = previous_sections(args.out), 0
    for k in keys:
        config = (QUICK if args.quick else FULL)[k]
        text, rc = run_section(k, config, args.quick)
        if k == "tta":
            models = config[config.index("--models") + 1].split(",")
            sections[k] = tta_section(sections.get(k, ""), models, text, args.quick)
        else:
            sections[k] = section_title(k, args.quick) + text
        failed += rc != 0
    page = ["# Validation results", "",
            "Regenerated by `python3 bench/validation_results.py` (see its --help); every number below was "
            "measured by the command quoted in its section, on the machine named there. Timings on a shared "
            "machine are noisy: the benchmarks report medians of interleaved repeats and the noise floor.", ""]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(page) + "\n" + "\n".join(sections[k].rstrip("\n") + "\n" for k in FULL if k in sections))
    os.replace(tmp, args.out)
    print("wrote", args.out)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
