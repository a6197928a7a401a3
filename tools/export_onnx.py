#!/usr/bin/python3
"""tools/export_onnx.py: exports PyTorch models as ONNX files QSync trains (qsync-worker --model X.onnx).

Run with Debian's python3-torch (apt-get install python3-torch python3-onnx; PyTorch 1.13):
    /usr/bin/python3 tools/export_onnx.py resnet18 -o resnet18.onnx       # CIFAR-style ResNet-18
    /usr/bin/python3 tools/export_onnx.py encoder  -o encoder.onnx        # a small BERT-like encoder
    /usr/bin/python3 tools/export_onnx.py gpt      -o gpt.onnx            # a small causal GPT
    /usr/bin/python3 tools/export_onnx.py --golden tests/golden/onnx      # the test goldens (tiny)

Data: ResNet-18 takes (1, 32, 32) images: Fashion-MNIST padded by 2 pixels (the worker pads the
28 x 28 images when a model asks for 32 x 32; --channels 3 gives CIFAR's (3, 32, 32) for other
data). The encoder and the GPT read 64 characters of the char corpus (vocab 96, the worker's
worker/data/char_corpus.h) and predict the next one at every position (the encoder sees the whole
window, so it learns to copy: a check of the plumbing more than a language model).

Export choices the engine relies on (planner/model_onnx.h): training mode (BatchNormalization
and Dropout stay in the graph), opset 17 (LayerNormalization is one node), no constant folding
(parameter names survive: plans name layers after the nodes, "layer1.0.conv1"), a dynamic batch,
and reshapes written with -1 for the batch. Attention is q, k, v Linear layers, MatMul, Softmax
and a Where over a constant causal mask (no Split, no Shape ops).

--golden writes, per model, <name>.onnx and <name>.json: the input batch, targets, PyTorch's
logits, the mean cross-entropy loss, every parameter's gradient (by initializer name) and the
logits after one SGD step (lr 0.1) on that batch; tests/worker/onnx_golden_test.cpp compares.
"""

import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 96  # worker/data/char_corpus.h CHAR_VOCAB_SIZE


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet18(nn.Module):
    """torchvision's ResNet-18 in its CIFAR form: a 3x3 stem without max pooling, [2, 2, 2, 2] blocks."""

    def __init__(self, channels=1, width=64, classes=10, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * (2 ** i)
            stage = [BasicBlock(cin if j == 0 else cout, cout, (1 if i == 0 else 2) if j == 0 else 1) for j in range(n)]
            layers.append(nn.Sequential(*stage))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SelfAttention(nn.Module):
    def __init__(self, width, heads, seq_len, causal, dropout):
        super().__init__()
        self.width, self.heads, self.seq_len, self.causal = width, heads, seq_len, causal
        self.q, self.k, self.v = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)
        # True above the diagonal: the future positions a causal model must not see.
        self.register_buffer("mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1))

    def split(self, x):
        return x.reshape(-1, self.seq_len, self.heads, self.width // self.heads).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.width // self.heads))
        if self.causal:
            att = att.masked_fill(self.mask, float("-inf"))
        y = self.drop(att.softmax(-1)) @ v
        return self.proj(y.transpose(1, 2).reshape(-1, self.seq_len, self.width))


class Block(nn.Module):
    def __init__(self, width, heads, seq_len, causal, dropout, pre_norm):
        super().__init__()
        self.pre_norm = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, seq_len, causal, dropout)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.act = nn.GELU()
        self.drop = nn.Dropout(dropout)

    def mlp(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))

    def forward(self, x):
        if self.pre_norm:  # GPT-2
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))  # BERT: post-norm
        return self.ln2(x + self.mlp(x))


class TokenModel(nn.Module):
    def __init__(self, causal, width=128, heads=4, layers=4, seq_len=64, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.randn(1, seq_len, width) * 0.02)
        self.blocks = nn.Sequential(*[Block(width, heads, seq_len, causal, dropout, pre_norm=causal) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, idx):
        return self.head(self.ln_f(self.blocks(self.tok(idx) + self.pos)))


def build(name, tiny=False, channels=1, dropout=0.1, width=None):
    if name == "resnet18":
        return ResNet18(channels=channels, width=4 if tiny else (width or 64)), (channels, 32, 32)
    kw = dict(width=16, heads=2, layers=2, seq_len=8, dropout=0.0) if tiny else dict(dropout=dropout)
    model = TokenModel(causal=(name == "gpt"), **kw)
    return model, (kw.get("seq_len", 64),)


def export(model, sample, path):
    model.train()
    torch.onnx.export(model, sample, path, opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def sample_batch(name, shape, batch, gen):
    if name == "resnet18":
        x = torch.randn((batch,) + shape, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        return x, y
    seq = torch.randint(0, VOCAB, (batch, shape[0] + 1), generator=gen)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def f32_list(t):
    """A tensor's values as the shortest decimal that reads back as the same float32 (small files)."""
    import numpy as np
    return [float(str(np.float32(v))) for v in t.detach().reshape(-1).tolist()]


def golden(name, out_dir):
    torch.manual_seed(20261202)
    model, shape = build(name, tiny=True)
    gen = torch.Generator().manual_seed(7)
    x, y = sample_batch(name, shape, 3, gen)
    onnx_path = os.path.join(out_dir, name + ".onnx")
    export(model, x, onnx_path)
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad()
    loss.backward()
    grads = {n: f32_list(p.grad) for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
        after = model(x)
    record = {
        "model": name, "input_shape": list(x.shape), "input": f32_list(x.float()),
        "targets": y.reshape(-1).tolist(), "logits_shape": list(logits.shape),
        "logits": f32_list(logits), "loss": loss.item(), "grads": grads,
        "lr": 0.1, "logits_after_step": f32_list(after),
    }
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
    print(f"{onnx_path}: loss {loss.item():.6f}, {sum(p.numel() for p in model.parameters())} parameters")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", choices=["resnet18", "encoder", "gpt"])
    ap.add_argument("-o", "--output", help="the .onnx file to write")
    ap.add_argument("--channels", type=int, default=1, help="ResNet input channels (1: Fashion-MNIST, 3: CIFAR)")
    ap.add_argument("--dropout", type=float, default=0.1, help="token models' dropout")
    ap.add_argument("--width", type=int, help="ResNet base width (default 64: the 11.2 M parameters of ResNet-18)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--golden", metavar="DIR", help="write the test goldens of all three models (tiny) to DIR")
    a = ap.parse_args()
    if a.golden:
        os.makedirs(a.golden, exist_ok=True)
        for name in ("resnet18", "encoder", "gpt"):
            golden(name, a.golden)
        return
    if not a.model or not a.output:
        ap.error("give a model and -o FILE (or --golden DIR)")
    torch.manual_seed(a.seed)
    model, shape = build(a.model, channels=a.channels, dropout=a.dropout, width=a.width)
    x, _ = sample_batch(a.model, shape, 2, torch.Generator().manual_seed(a.seed))
    export(model, x, a.output)
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.output}: {a.model}, input {tuple(shape)}, {n} parameters ({n * 4 / 1e6:.1f} MB FP32)")


if __name__ == "__main__":
    main()
