#!/usr/bin/env python3
"""scripts/gpu_check_torch_step.py: PyTorch eager's training step on a zoo model, the baseline of
scripts/gpu-check.sh's step-time comparison.

The model is tools/torch_models.py's mirror of the YAML model (the same layers as QSync's
engine computes), trained on random token ids (character models) or random images with AdamW
(lr 1e-3, QSync's default), batch B, in one of three modes:
  fp32   strict FP32 (TF32 off for matmuls and cuDNN)
  tf32   FP32 tensors, TF32 tensor cores allowed
  bf16   torch.autocast(dtype=bfloat16) around forward and loss (TF32 off)
Prints one JSON line: {"model", "mode", "batch", "device", "median_ms", "tokens_per_s", "peak_bytes"}.
The step is timed with CUDA events (median over --steps after --warmup steps); on a CPU (a dry
run) with the host clock.

  python3 scripts/gpu_check_torch_step.py --model gpt-768 --batch 16 --mode bf16 --steps 20
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_models import build_torch_model, zoo_path  # noqa: E402
import yaml  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt-768")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--mode", choices=["fp32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    dev = torch.device(args.device)
    tf32 = args.mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(1)
    with open(zoo_path(args.model)) as f:
        spec = yaml.safe_load(f)
    module, _ = build_torch_model(zoo_path(args.model))
    module = module.to(dev)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
    inp = spec["input"]
    tokens = inp.get("kind") == "tokens"
    if tokens:
        T, V = int(inp["seq_len"]), int(inp["vocab"])
        x = torch.randint(0, V, (args.batch, T), device=dev)
        y = torch.randint(0, V, (args.batch, T), device=dev)
    else:
        shape = [int(d) for d in inp["shape"]]
        x = torch.randn(args.batch, *shape, device=dev)
        y = torch.randint(0, int(spec.get("classes", 10)), (args.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=args.mode == "bf16"):
            logits = module(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        opt.step()

    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    positions = args.batch * (int(inp["seq_len"]) if tokens else 1)
    print(json.dumps({"model": args.model, "mode": args.mode, "batch": args.batch, "device": str(dev),
                      "torch": torch.__version__, "median_ms": ms, "tokens_per_s": positions / (ms * 1e-3),
                      "peak_bytes": torch.cuda.max_memory_allocated(dev) if cuda else 0}))


if __name__ == "__main__":
    main()
