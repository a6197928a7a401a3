#!/usr/bin/python3
"""bench/onnx_convergence_bench.py: an ONNX model trained by QSync against the same model trained
by PyTorch in FP32, paired by seed (the same initial weights: PyTorch's init, exported).

    /usr/bin/python3 bench/onnx_convergence_bench.py [--model gpt|encoder|resnet18] [--steps 200] [--seeds 1,2,3]

Per seed: tools/export_onnx.py's TokenModel (width 64, 2 blocks, 4 heads, T 32, dropout 0) is built
with torch.manual_seed(seed) and exported; `qsync-worker train --model it.onnx` trains it on the
fortunes corpus (AdamW lr 1e-3, constant, no weight decay, no clipping, batch 16) and PyTorch trains
the same weights with the same optimizer, the same vocabulary and split (worker/data/char_corpus.h),
windows drawn by its own RNG (the batches differ: seed noise, as between two QSync seeds). Reported:
the mean train loss of the last 20 steps and the validation loss on the first `--eval-windows`
windows at 0, T, 2T, ... of the validation split (the worker's --eval-limit), per seed and the
mean difference with its spread. resnet18: width 8 (--width), Fashion-MNIST padded to 32 x 32
(as the worker pads: each image's corner pixel), batch 32, the first --eval-windows test images
(eval mode: BatchNorm's running statistics). Not a test: the numbers go to docs/onnx.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import export_onnx  # noqa: E402

CORPUS = "/usr/share/games/fortunes"
FMNIST = "/usr/share/datasets/fashion-mnist"


def fashion_mnist(split):
    """Normalized (x/255 - 0.2860) / 0.3530, padded 28 -> 32 with each image's corner pixel."""
    import gzip
    with gzip.open(os.path.join(FMNIST, f"{split}-images-idx3-ubyte.gz")) as f:
        x = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8).float().reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(FMNIST, f"{split}-labels-idx1-ubyte.gz")) as f:
        y = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
    x = (x / 255 - 0.2860) / 0.3530
    out = x[:, :, :1, :1].expand(-1, -1, 32, 32).clone()
    out[:, :, 2:30, 2:30] = x
    return out, y


def torch_image_run(model, steps, batch, lr, eval_images, seed):
    x, y = fashion_mnist("train")
    tx, ty = fashion_mnist("t10k")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(x), (batch,), generator=gen)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        test = F.cross_entropy(model(tx[:eval_images]), ty[:eval_images]).item()
    return losses, test


def corpus_tokens(path):
    """worker/data/char_corpus.h: folder files in name order, no binary / *.u8, '%' lines empty."""
    names = sorted(os.listdir(path))
    texts = []
    for n in names:
        p = os.path.join(path, n)
        if not os.path.isfile(p) or n.endswith(".u8"):
            continue
        with open(p, "rb") as f:
            data = f.read()
        if b"\0" in data[:4096]:
            continue
        lines = data.split(b"\n")
        texts.append(b"\n".join(b"" if l == b"%" else l for l in lines))
    text = b"\n".join(texts)
    out = []
    for c in text:
        if 32 <= c <= 126:
            out.append(c - 32)
        elif c == 10:
            out.append(95)
        elif c == 9:
            out.append(0)
    return out


def torch_run(model, tokens, val, seq_len, steps, batch, lr, eval_windows, seed):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    data = torch.tensor(tokens)
    losses = []
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(tokens) - seq_len - 1, (batch,), generator=gen)
        win = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])
        logits = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    v = torch.tensor(val)
    with torch.no_grad():
        n = min(eval_windows, (len(val) - 1) // seq_len)
        win = torch.stack([v[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)])
        logits = model(win[:, :-1])
        test = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1)).item()
    return losses, test


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt", choices=["gpt", "encoder", "resnet18"])
    ap.add_argument("--width", type=int, default=8, help="resnet18 base width")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-windows", type=int, default=200)
    ap.add_argument("--worker", default=os.path.join(ROOT, "build/bin/qsync-worker"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    train = val = None
    if a.model != "resnet18":  # the worker's split: the last 10 % of the tokens held out
        tokens = corpus_tokens(CORPUS)
        n_val = int(len(tokens) * 0.1)
        train, val = tokens[:len(tokens) - n_val], tokens[len(tokens) - n_val:]
    seq_len = 32
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in a.seeds.split(",")]:
            torch.manual_seed(seed)
            image = a.model == "resnet18"
            if image:
                model = export_onnx.ResNet18(channels=1, width=a.width)
                sample = torch.randn(2, 1, 32, 32)
            else:
                model = export_onnx.TokenModel(causal=(a.model == "gpt"), width=64, heads=4, layers=2, seq_len=seq_len,
                                               dropout=0.0)
                sample = torch.randint(0, export_onnx.VOCAB, (2, seq_len))
            path = os.path.join(tmp, f"{a.model}-{seed}.onnx")
            export_onnx.export(model, sample, path)
            summary = os.path.join(tmp, f"summary-{seed}.json")
            subprocess.run([a.worker, "train", "--model", path, "--data", FMNIST if image else CORPUS, "--steps", str(a.steps),
                            "--batch", str(a.batch), "--lr", str(a.lr), "--optimizer", "adamw", "--weight-decay", "0",
                            "--lr-schedule", "constant", "--warmup", "0", "--grad-clip", "0", "--seed", str(seed),
                            "--eval-limit", str(a.eval_windows), "--threads", "1", "--quiet",
                            "--summary-json", summary], check=True)
            with open(summary) as f:
                ours = json.load(f)
            if image:
                losses, test = torch_image_run(model, a.steps, a.batch, a.lr, a.eval_windows, seed)
            else:
                losses, test = torch_run(model, train, val, seq_len, a.steps, a.batch, a.lr, a.eval_windows, seed)
            rows.append((seed, statistics.mean(ours["losses"][-20:]), statistics.mean(losses[-20:]),
                         ours["final_test_loss"], test))
    print(f"{a.model}, {a.steps} steps, batch {a.batch}, AdamW lr {a.lr}")
    print("seed  qsync train  torch train  qsync val  torch val")
    for r in rows:
        print(f"{r[0]:4d}  {r[1]:11.4f}  {r[2]:11.4f}  {r[3]:9.4f}  {r[4]:9.4f}")
    d_train = [r[1] - r[2] for r in rows]
    d_val = [r[3] - r[4] for r in rows]
    spread = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print(f"qsync - torch: train {statistics.mean(d_train):+.4f} (sd {spread(d_train):.4f}), "
          f"val {statistics.mean(d_val):+.4f} (sd {spread(d_val):.4f})")


if __name__ == "__main__":
    main()
