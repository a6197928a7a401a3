"""tools/torch_models.py: PyTorch mirrors of QSync's YAML models (examples/models/*.yaml).

build_torch_model(yaml_path) -> (module, name_map) builds a torch.nn.Module that computes exactly
what QSync's training engine (worker/) computes for the same model file, in FP32:

    module, name_map = build_torch_model("examples/models/vit.yaml")
    logits = module(x)                      # x: (B, C, H, W) images, or (B, T) token ids
    loss = cross_entropy(logits, targets)   # the engine's softmax_cross_entropy, mean over positions
    state = our_state(module, name_map)     # OrderedDict: our parameter name -> tensor, our shapes
    load_our_state(module, name_map, state) # the reverse (e.g. to start from a QSync checkpoint)

name_map is an OrderedDict from OUR parameter names to the module's named_parameters() names, in
the engine's parameter order (Model::parameters(): forward order; weight before bias). Our names:
  linear, conv2d, layernorm   "<layer>.weight", "<layer>.bias"
  embedding                   "<layer>.weight" (vocab, dim), "<layer>.position" (T, dim)
  positional                  "<layer>.weight" (T, C)
  attention A                 "A.qkv.weight" (3C, C), "A.qkv.bias", "A.proj.weight" (C, C), "A.proj.bias"
Shapes are PyTorch's except conv2d weights, which the engine stores as (O, C*k*k): torch's
(O, C, k, k) flattened (tap order ci, ky, kx). our_state / our_grads / load_our_state convert.

Layer semantics mirrored (planner/model_desc.h, worker/layers/*.cpp):
  linear (bias default true), conv2d (stride 1, padding 0, bias true by default), relu, gelu
  (exact erf), maxpool2d (stride defaults to kernel, no padding), global_avg_pool ((C,H,W) -> (C)
  or (T,C) -> (C), a mean), flatten, to_tokens ((C,H,W) -> (H*W, C), token y*W+x), positional
  (x + weight), layernorm (eps 1e-5, affine, last dim), embedding (token table + learned
  positions), attention (qkv -> q|k|v blocks of C, head h = columns h*C/H.., softmax(q k^T /
  sqrt(C/H)) with optional causal mask, -> proj), dropout, residual (x + body(x)), and
  transformer_block B, which expands to
    B.attn_res = residual[B.ln1, B.attn, (B.attn_drop)]
    B.mlp_res  = residual[B.ln2, B.mlp.fc1 (mlp_ratio*C, default 4), B.mlp.gelu, B.mlp.fc2, (B.mlp_drop)]
  with the dropouts only when dropout > 0.
Initialization is PyTorch's default for linear/conv2d/layernorm (the same distributions as the
engine's, not the same values) and N(0, 0.02) for embedding and positional tables.
Needs PyTorch and PyYAML (Debian: /usr/bin/python3 with python3-torch, python3-yaml).
"""

import collections
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "models")
LAYERNORM_EPS = 1e-5
TABLE_INIT_STD = 0.02  # embedding and positional tables (the engine's INIT_STD)


def zoo_path(name):
    """The path of a zoo model ("cnn" -> examples/models/cnn.yaml); other values are paths."""
    return os.path.join(ZOO_DIR, name + ".yaml") if os.sep not in name and not name.endswith(".yaml") else name


# ------------------------------------------------------------------------------------------------
# Leaf modules without a torch.nn equivalent


class ToTokens(nn.Module):
    """(B, C, H, W) -> (B, H*W, C)."""

    def forward(self, x):
        return x.flatten(2).transpose(1, 2)


class GlobalAvgPool(nn.Module):
    """(B, C, H, W) -> (B, C) or (B, T, C) -> (B, C): the mean over positions."""

    def forward(self, x):
        return x.mean(dim=(2, 3)) if x.dim() == 4 else x.mean(dim=1)


class Positional(nn.Module):
    """x (B, T, C) + weight (T, C)."""

    def __init__(self, tokens, width):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(tokens, width).normal_(0.0, TABLE_INIT_STD))

    def forward(self, x):
        return x + self.weight


class Embedding(nn.Module):
    """Token ids (B, T) (integers, possibly as floats) -> weight[id] + position[t], (B, T, dim)."""

    def __init__(self, vocab, tokens, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, dim).normal_(0.0, TABLE_INIT_STD))
        self.position = nn.Parameter(torch.empty(tokens, dim).normal_(0.0, TABLE_INIT_STD))

    def forward(self, ids):
        return F.embedding(ids.long(), self.weight) + self.position


class Attention(nn.Module):
    """Multi-head self-attention as worker/layers/attention.cpp: x (B, T, C) -> (B, T, C)."""

    def __init__(self, width, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.heads
        q, k, v = self.qkv(x).split(c, dim=2)  # each (B, T, C)
        q, k, v = (z.view(b, t, self.heads, hs).transpose(1, 2) for z in (q, k, v))  # (B, H, T, hs)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, H, T, T)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(dim=-1) @ v  # (B, H, T, hs)
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class Residual(nn.Module):
    """x + body(x)."""

    def __init__(self, body):
        super().__init__()
        self.body = nn.Sequential(*body)

    def forward(self, x):
        return x + self.body(x)


class QSyncTorchModel(nn.Module):
    """The mirror of one model file. Attributes: model_name, task ("classification" or
    "language_model"), input_kind ("image" or "tokens"), input_shape (per sample), classes, vocab."""

    def __init__(self, layers, info):
        super().__init__()
        self.net = nn.Sequential(*layers)
        for key, value in info.items():
            setattr(self, key, value)

    def forward(self, x):
        return self.net(x)


# ------------------------------------------------------------------------------------------------
# Building from the YAML


class _Builder:
    def __init__(self, source, vocab):
        self.source, self.vocab = source, vocab
        self.name_map = collections.OrderedDict()  # ours -> torch, in the engine's order

    def fail(self, msg):
        raise ValueError("%s: %s" % (self.source, msg))

    def params(self, ours, torch_prefix, names):
        for ours_suffix, torch_suffix in names:
            self.name_map["%s.%s" % (ours, ours_suffix)] = torch_prefix + torch_suffix

    def layer_list(self, specs, shape, prefix):
        """Builds `specs` (YAML layer mappings) receiving per-sample `shape`; returns
        (modules, output shape). `prefix`: the torch path of the enclosing Sequential."""
        modules = []
        for spec in specs:
            module, shape = self.layer(spec, shape, "%s%d." % (prefix, len(modules)))
            modules.append(module)
        return modules, shape

    def layer(self, spec, shape, tp):
        """One layer (tp: its torch path with a trailing dot) -> (module, output shape)."""
        name, kind = spec.get("name"), spec.get("type")
        if not name or not kind:
            self.fail("every layer needs a name and a type: %r" % (spec,))
        if kind == "linear":
            m = nn.Linear(shape[-1], int(spec["out"]), bias=bool(spec.get("bias", True)))
            self.params(name, tp, [("weight", "weight")] + ([("bias", "bias")] if m.bias is not None else []))
            return m, shape[:-1] + [m.out_features]
        if kind == "conv2d":
            c, h, w = shape
            k, s, p = int(spec["kernel"]), int(spec.get("stride", 1)), int(spec.get("padding", 0))
            m = nn.Conv2d(c, int(spec["out_channels"]), k, stride=s, padding=p, bias=bool(spec.get("bias", True)))
            self.params(name, tp, [("weight", "weight")] + ([("bias", "bias")] if m.bias is not None else []))
            return m, [m.out_channels, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1]
        if kind == "relu":
            return nn.ReLU(), shape
        if kind == "gelu":
            return nn.GELU(), shape  # approximate='none': the exact erf form
        if kind == "maxpool2d":
            k = int(spec["kernel"])
            s = int(spec.get("stride", k))
            return nn.MaxPool2d(k, stride=s), [shape[0], (shape[1] - k) // s + 1, (shape[2] - k) // s + 1]
        if kind == "global_avg_pool":
            return GlobalAvgPool(), [shape[0]] if len(shape) == 3 else [shape[1]]
        if kind == "flatten":
            return nn.Flatten(), [math.prod(shape)]
        if kind == "to_tokens":
            return ToTokens(), [shape[1] * shape[2], shape[0]]
        if kind == "positional":
            self.params(name, tp, [("weight", "weight")])
            return Positional(shape[0], shape[1]), shape
        if kind == "layernorm":
            self.params(name, tp, [("weight", "weight"), ("bias", "bias")])
            return nn.LayerNorm(shape[-1], eps=LAYERNORM_EPS), shape
        if kind == "embedding":
            self.params(name, tp, [("weight", "weight"), ("position", "position")])
            return Embedding(self.vocab, shape[0], int(spec["dim"])), [shape[0], int(spec["dim"])]
        if kind == "attention":
            return self.attention(name, shape, int(spec["heads"]), bool(spec.get("causal", False)), tp), shape
        if kind == "dropout":
            return nn.Dropout(float(spec["p"])), shape
        if kind == "residual":
            body, out = self.layer_list(spec["layers"], shape, tp + "body.")
            if out != shape:
                self.fail("residual '%s' body maps %s to %s" % (name, shape, out))
            return Residual(body), shape
        if kind == "transformer_block":
            return self.transformer_block(name, spec, shape, tp), shape
        self.fail("layer '%s': unknown type '%s'" % (name, kind))

    def attention(self, name, shape, heads, causal, tp):
        if len(shape) != 2 or shape[1] % heads:
            self.fail("attention '%s' needs (tokens, width) with heads dividing the width, got %s" % (name, shape))
        self.params(name, tp, [("qkv.weight", "qkv.weight"), ("qkv.bias", "qkv.bias"),
                               ("proj.weight", "proj.weight"), ("proj.bias", "proj.bias")])
        return Attention(shape[1], heads, causal)

    def transformer_block(self, b, spec, shape, tp):
        """planner/model_shapes.cpp transformer_block: a Sequential of two residuals."""
        width = shape[1]
        heads, ratio = int(spec["heads"]), int(spec.get("mlp_ratio", 4))
        causal, dropout = bool(spec.get("causal", False)), float(spec.get("dropout", 0.0))
        attn_tp, mlp_tp = tp + "0.body.", tp + "1.body."
        self.params(b + ".ln1", attn_tp + "0.", [("weight", "weight"), ("bias", "bias")])
        attn_body = [nn.LayerNorm(width, eps=LAYERNORM_EPS),
                     self.attention(b + ".attn", shape, heads, causal, attn_tp + "1.")]
        self.params(b + ".ln2", mlp_tp + "0.", [("weight", "weight"), ("bias", "bias")])
        self.params(b + ".mlp.fc1", mlp_tp + "1.", [("weight", "weight"), ("bias", "bias")])
        self.params(b + ".mlp.fc2", mlp_tp + "3.", [("weight", "weight"), ("bias", "bias")])
        mlp_body = [nn.LayerNorm(width, eps=LAYERNORM_EPS), nn.Linear(width, ratio * width), nn.GELU(),
                    nn.Linear(ratio * width, width)]
        if dropout > 0:
            attn_body.append(nn.Dropout(dropout))
            mlp_body.append(nn.Dropout(dropout))
        return nn.Sequential(Residual(attn_body), Residual(mlp_body))


def build_torch_model(yaml_path):
    """Builds the PyTorch mirror of a QSync model file (a path, or a zoo name such as "cnn").
    Returns (module, name_map): name_map is an OrderedDict our parameter name -> the module's
    named_parameters() name, in the engine's parameter order. Raises ValueError on a malformed
    file (the planner's own checks are stricter: validate files with QSync itself)."""
    path = zoo_path(yaml_path)
    with open(path) as f:
        doc = yaml.safe_load(f)
    inp = doc["input"]
    info = {"model_name": doc["name"], "task": doc["task"], "input_kind": inp["kind"],
            "classes": int(doc.get("classes", 0)), "vocab": int(inp.get("vocab", 0))}
    info["input_shape"] = [int(d) for d in inp["shape"]] if inp["kind"] == "image" else [int(inp["seq_len"])]
    builder = _Builder(path, info["vocab"])
    layers, out = builder.layer_list(doc["layers"], list(info["input_shape"]), "net.")
    want = [info["classes"]] if info["task"] == "classification" else [info["input_shape"][0], info["vocab"]]
    if out != want:
        builder.fail("the model outputs %s per sample, expected %s" % (out, want))
    module = QSyncTorchModel(layers, info)
    torch_names = dict(module.named_parameters())
    missing = [t for t in builder.name_map.values() if t not in torch_names]
    if missing or len(torch_names) != len(builder.name_map):
        raise AssertionError("torch_models: parameter mapping out of sync with the module: %s" % missing)
    return module, builder.name_map


# ------------------------------------------------------------------------------------------------
# Our names and shapes


def _our_shape(tensor):
    """The engine's shape of a torch parameter tensor (conv weights flattened to (O, C*k*k))."""
    return tensor.reshape(tensor.shape[0], -1) if tensor.dim() == 4 else tensor


def our_state(module, name_map):
    """OrderedDict our parameter name -> detached parameter tensor in the engine's shape."""
    params = dict(module.named_parameters())
    return collections.OrderedDict((o, _our_shape(params[t].detach())) for o, t in name_map.items())


def our_grads(module, name_map):
    """OrderedDict our parameter name -> gradient in the engine's shape (zeros where grad is None)."""
    params = dict(module.named_parameters())
    out = collections.OrderedDict()
    for o, t in name_map.items():
        p = params[t]
        out[o] = _our_shape(p.grad.detach() if p.grad is not None else torch.zeros_like(p))
    return out


def load_our_state(module, name_map, state):
    """Copies `state` (our name -> tensor in the engine's shape) into the module's parameters."""
    params = dict(module.named_parameters())
    with torch.no_grad():
        for o, t in name_map.items():
            if o not in state:
                raise KeyError("load_our_state: no value for parameter '%s'" % o)
            value = torch.as_tensor(state[o], dtype=params[t].dtype)
            if value.numel() != params[t].numel() or tuple(value.shape) != tuple(_our_shape(params[t]).shape):
                raise ValueError("load_our_state: '%s' has shape %s, expected %s"
                                 % (o, tuple(value.shape), tuple(_our_shape(params[t]).shape)))
            params[t].copy_(value.reshape(params[t].shape))


def cross_entropy(logits, targets):
    """The engine's softmax_cross_entropy with loss_divisor = positions: the mean over the rows
    of the last dimension. logits (B, C) or (B, T, V); targets B or B*T class/token ids."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())
