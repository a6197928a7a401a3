#!/usr/bin/python3
"""bench/worker_bench_table.py: worker_bench.py's results as its one table (a row per model, class
and precision of ours, PyTorch alongside) and the notes that say what each column means."""

from torch_baseline import torch_blas_note

MIB = 1 << 20


def fmt_ms(r):
    return "%.1f" % (r["median_step_seconds"] * 1e3) if r and r.get("status") == "ok" else "-"


def fmt_ratio(a, b):
    ok = a and b and a.get("status") == "ok" and b.get("status") == "ok"
    return "%.2f" % (a["median_step_seconds"] / b["median_step_seconds"]) if ok else "-"


def render_table(results):
    """The one table: a row per (model, class, precision) of ours, with PyTorch alongside."""
    head = ["model", "batch", "class", "prec", "ours ms", "ours MiB acc/RSS", "torch fp32 ms capped/uncapped",
            "torch bf16 ms", "torch RSS MiB f32/b16", "ours/torch", "uncapped", "vs own fp32", "faults/step"]
    rows = []
    cmp_class = results["bf16_comparison_class"]
    for m in results["models"]:
        name = m["model"]
        tf, tb = m["torch"].get("fp32"), m["torch"].get("bf16-autocast")
        trss = "%s/%s" % tuple("%.0f" % (t["peak_rss_bytes"] / MIB) if t and t.get("status") == "ok" else "-"
                               for t in (tf, tb))
        for cls in results["classes"]:
            runs = m["ours"].get(cls, {})
            # torch FP32 capped at this class's ISA where the class is capped (else the uncapped run)
            tc = m.get("torch_capped", {}).get(cls) or tf
            tfs = "%s/%s" % (fmt_ms(tc), fmt_ms(tf)) if tc is not tf else fmt_ms(tf)
            if results["class_status"][cls]["status"] != "available":
                rows.append([name, str(m["batch"]), cls, "-", "n/a", "-", fmt_ms(tf), fmt_ms(tb), trss, "-", "-",
                             "(runs as %s)" % results["class_status"][cls]["fallback"], "-"])
                continue
            fp32 = runs.get("fp32")
            for prec, r in runs.items():
                if r.get("status") != "ok":
                    rows.append([name, str(m["batch"]), cls, prec, r.get("status", "?"), "-", tfs, fmt_ms(tb),
                                 trss, "-", "-", "-", "-"])
                    continue
                mem = "%.1f/%.0f" % (r["peak_memory_bytes"] / MIB, r["peak_rss_bytes"] / MIB)
                vs_uncapped = "-"
                if prec == "fp32":
                    vs_torch, vs_uncapped = fmt_ratio(r, tc), fmt_ratio(r, tf)
                elif prec == "bf16":
                    vs_torch = fmt_ratio(r, tb) + ("*" if cls == cmp_class else "")
                else:
                    vs_torch = "-"
                vs_fp32 = "1.00" if prec == "fp32" else fmt_ratio(r, fp32)
                faults = r.get("steady_minor_page_faults_per_step")
                rows.append([name, str(m["batch"]), cls, prec, fmt_ms(r), mem, tfs, fmt_ms(tb), trss, vs_torch,
                             vs_uncapped, vs_fp32, "-" if faults is None or faults < 0 else "%.1f" % faults])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths))
    out = [line(head), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_notes(results):
    """What the table's columns mean and which class the BF16 comparison uses."""
    notes = [
        "ours ms / torch ms: median step (zero_grad + forward + loss + backward + AdamW step); threads: %d; "
        "median of %d interleaved run(s), one process each; torch: median of %d steps after %d warm-up; ours: %s."
        % (results["threads"], results["repeats"], results["steps"], results["torch_warmup"], results["ours_timing"]),
        "ours MiB acc/RSS: the worker's accounted tensor peak / the process's peak RSS (incl. its shared "
        "libraries and its data set).",
        "torch RSS: peak RSS of the PyTorch process (of which ~%s MiB is torch itself before the first step)."
        % results.get("torch_baseline_rss_mib", "?"),
        "torch fp32 ms capped/uncapped: PyTorch FP32 capped at the row's class's ISA (ATEN_CPU_CAPABILITY, "
        "ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS, OPENBLAS_CORETYPE; ATen ran as: %s) / uncapped; one number "
        "where the class is uncapped (cpu-amx)." % (", ".join("%s %s" % kv for kv in sorted(
            results.get("torch_capped_cpu_capability", {}).items())) or "-"),
        "ours/torch: fp32 rows ours-fp32 / torch-fp32 capped at the class's ISA (uncapped: against the uncapped "
        "run); bf16 rows ours-bf16 / torch-bf16-autocast, uncapped (* = the class used for the BF16 "
        "comparison). > 1: ours is slower.",
        "vs own fp32: ours at this precision / ours fp32, same class, same run (< 1: faster than fp32).",
        "faults/step: the worker's minor page faults per step after its warm-up steps (getrusage).",
        torch_blas_note(results),
        "BF16 comparison: " + results["bf16_comparison_note"],
    ]
    for cls in results["classes"]:
        st = results["class_status"][cls]
        if st["status"] != "available":
            notes.append("%s: not run (%s)." % (cls, st["note"]))
    return "\n".join(notes)
