#!/usr/bin/python3
"""tools/make_golden.py: writes the PyTorch golden files of tests/worker/golden_test.cpp.

Run with Debian's python (the one with python3-torch):  /usr/bin/python3 tools/make_golden.py
For each model (default: the zoo's cnn and vit), in float32 with torch.manual_seed(seed):
  1. builds the PyTorch mirror (tools/torch_models.py) with PyTorch's default init, then snaps
     every parameter to an int8 grid with a power-of-two scale per tensor (q * 2^e, |q| <= 127),
     so the file holds the initial values exactly in one byte each;
  2. takes the first `batch` Fashion-MNIST training images and labels (normalized as
     worker/data/fashion_mnist.h: (x/255 - 0.2860) / 0.3530); a token model (char-gpt, not
     committed: too large) gets seeded random sequences, targets the next token;
  3. computes the logits, the mean cross-entropy loss over the N target positions and every
     parameter gradient;
  4. from the same init, trains `steps` SGD steps (lr, no momentum, no weight decay) on that same
     batch and records each step's loss (taken before its update, as llm.c's expected_losses).

File format (tests/golden/<model>.qgold), little-endian:
  u32 magic 20261129, u32 version 1, u32 P (parameters), u32 S (training steps)
  string model        the zoo name ("cnn"); a string is u32 length + UTF-8 bytes
  u32 B               the batch size
  tensor input        (B, C, H, W) images, or (B, T) token ids as floats
  u32 N, i32 labels[N] the targets: N = B class ids, or B*T token ids (position b*T + t)
  tensor logits       (B, classes) or (B, T, vocab)
  f32 loss            mean cross-entropy over the N positions
  P tensors           the parameters, in the engine's order, named and shaped as the engine's
  P tensors           their gradients (same names, same order)
  f32 lr, f32 losses[S]
A tensor is: string name, u32 rank, i64 dims[rank], u32 encoding, then per encoding
  0 F32     f32 values[numel]
  1 INT8    f32 scale (a power of two), i8 q[numel]: value = q * scale, exactly
  2 SAMPLE  u64 stride, f32 max_abs, f64 l2, f32 values[ceil(numel / stride)]: the elements at
            0, stride, 2 stride, ... of a tensor too large to store whole (gradients over
            SAMPLE_ABOVE elements); max_abs and l2 are over the whole tensor. The stride is
            coprime with the last dimension, so the samples visit every row and column.
The reader is tests/worker/golden_test.cpp. Files stay small: the CNN's 0.87 M parameters take
one byte each and its largest gradient (fc1.weight, 0.8 M) is sampled.
"""

import argparse
import gzip
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

MAGIC, VERSION = 20261129, 1
F32, INT8, SAMPLE = 0, 1, 2
SAMPLE_ABOVE = 65536   # gradients with more elements are sampled ...
SAMPLE_TARGET = 32768  # ... to about this many values
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
FMNIST_MEAN, FMNIST_STD = np.float32(0.2860), np.float32(0.3530)
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def fashion_mnist_batch(batch):
    """The first `batch` training images (B, 1, 28, 28) float32, normalized, and labels int64."""
    with gzip.open(os.path.join(FMNIST_DIR, "train-images-idx3-ubyte.gz")) as f:
        magic, count, rows, cols = struct.unpack(">4i", f.read(16))
        assert magic == 2051 and rows == 28 and cols == 28 and count >= batch
        pixels = np.frombuffer(f.read(batch * rows * cols), dtype=np.uint8)
    with gzip.open(os.path.join(FMNIST_DIR, "train-labels-idx1-ubyte.gz")) as f:
        magic, count = struct.unpack(">2i", f.read(8))
        assert magic == 2049 and count >= batch
        labels = np.frombuffer(f.read(batch), dtype=np.uint8)
    unit = pixels.astype(np.float32) / np.float32(255.0)
    images = ((unit - FMNIST_MEAN) / FMNIST_STD).reshape(batch, 1, rows, cols)
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def snap_to_int8_grid(module):
    """Rounds every parameter to q * 2^e with |q| <= 127 (e per tensor): exactly storable."""
    with torch.no_grad():
        for p in module.parameters():
            q, scale = int8_grid(p)
            p.copy_(q * scale)


def int8_grid(t):
    """(q int8 tensor as float, scale): the power-of-two scale with max|t| / scale <= 127."""
    amax = float(t.detach().abs().max())
    scale = 1.0 if amax == 0 else 2.0 ** math.ceil(math.log2(amax / 127.0))
    q = torch.round(t.detach() / scale).clamp(-127, 127)
    return q, torch.tensor(scale, dtype=torch.float32)


class Writer:
    """Accumulates the file's little-endian fields (see the format above)."""

    def __init__(self):
        self.parts = []

    def raw(self, fmt, *values):
        self.parts.append(struct.pack("<" + fmt, *values))

    def string(self, s):
        b = s.encode()
        self.raw("I", len(b))
        self.parts.append(b)

    def array(self, a, dtype):
        self.parts.append(np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes())

    def tensor(self, name, t, encoding=F32):
        t = t.detach().float().contiguous()
        self.string(name)
        self.raw("I", t.dim())
        self.raw("%dq" % t.dim(), *t.shape)
        flat = t.reshape(-1)
        if encoding == F32 and t.numel() > SAMPLE_ABOVE:
            encoding = SAMPLE
        self.raw("I", encoding)
        if encoding == F32:
            self.array(flat.numpy(), np.float32)
        elif encoding == INT8:
            q, scale = int8_grid(t)
            assert torch.equal(q * scale, t), "%s is not on its int8 grid" % name
            self.raw("f", float(scale))
            self.array(q.reshape(-1).numpy(), np.int8)
        else:
            stride = sample_stride(t.numel(), t.shape[-1])
            self.raw("Qfd", stride, float(flat.abs().max()), float(flat.double().norm()))
            self.array(flat[::stride].numpy(), np.float32)

    def bytes(self):
        return b"".join(self.parts)


def sample_stride(numel, last_dim):
    stride = max(1, -(-numel // SAMPLE_TARGET))
    while math.gcd(stride, last_dim) != 1:
        stride += 1
    return stride


def token_batch(module, batch, seed):
    """Seeded random sequences: ids (B, T) as floats, targets the next tokens (B*T)."""
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(module.vocab, (batch, module.input_shape[0] + 1), generator=gen)
    return seq[:, :-1].float(), seq[:, 1:].reshape(-1)


def forward_backward(module, x, y):
    module.zero_grad(set_to_none=False)
    logits = module(x)
    loss = torch_models.cross_entropy(logits, y)
    loss.backward()
    return logits, loss


def make_golden(model, batch, seed, steps, lr):
    torch.manual_seed(seed)
    module, name_map = torch_models.build_torch_model(model)
    snap_to_int8_grid(module)
    module.train()  # the zoo's models have no dropout: train and eval compute the same
    if module.input_kind == "tokens":
        x, y = token_batch(module, batch, seed)
    elif module.input_shape == [1, 28, 28]:
        x, y = fashion_mnist_batch(batch)
    else:
        raise SystemExit("%s: takes %s images, not Fashion-MNIST's" % (model, module.input_shape))
    init = torch_models.our_state(module, name_map)
    init = {k: v.clone() for k, v in init.items()}
    logits, loss = forward_backward(module, x, y)
    grads = torch_models.our_grads(module, name_map)

    w = Writer()
    w.raw("4I", MAGIC, VERSION, len(name_map), steps)
    w.string(model)
    w.raw("I", batch)
    w.tensor("input", x)
    w.raw("I", y.numel())
    w.array(y.numpy(), np.int32)
    w.tensor("logits", logits)
    w.raw("f", float(loss))
    for name, value in init.items():
        w.tensor(name, value, INT8)
    for name, g in grads.items():
        w.tensor(name, g)

    losses = []
    optimizer = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    for _ in range(steps):
        _, step_loss = forward_backward(module, x, y)
        losses.append(float(step_loss))
        optimizer.step()
    w.raw("f", lr)
    w.raw("%df" % steps, *losses)
    return w.bytes(), float(loss), losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["cnn", "vit"], help="zoo model names")
    ap.add_argument("--out-dir", default=os.path.normpath(os.path.join(REPO, "tests", "golden")))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)
    for model in args.models:
        data, loss, losses = make_golden(model, args.batch, args.seed, args.steps, args.lr)
        path = os.path.join(args.out_dir, model + ".qgold")
        with open(path, "wb") as f:
            f.write(data)
        print("%s: %d bytes, loss %.6f, SGD losses %s" % (path, len(data), loss, ["%.6f" % v for v in losses]))


if __name__ == "__main__":
    main()
