"""The three PyTorch models of the ONNX import tests, their export, and the
data they train on. Small enough to train 20 steps in seconds on 2 cores.

    python3 onnx_models.py OUT_DIR {mlp,cnn,gpt}

writes OUT_DIR/model.onnx (exported in training mode, so batch norm and
dropout export as such), OUT_DIR/initial.pt (the module's state_dict) and
OUT_DIR/data.safetensors (inputs and labels, in the order they are fed).
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
STEPS = 20


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """ResNet-18's shape in miniature: stem conv + batch norm + max pool, basic
    blocks with a strided downsampling block, global average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        # A narrow stem, so that no one operator needs more than a quarter of
        # the training step's memory (the budget test trains in a quarter).
        self.conv1 = nn.Conv2d(3, 4, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(4, 16, 1), BasicBlock(16, 16, 1))
        self.layer2 = nn.Sequential(BasicBlock(16, 32, 2), BasicBlock(32, 32, 1))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Block(nn.Module):
    def __init__(self, d, heads, seq, gelu):
        super().__init__()
        self.heads = heads
        self.gelu = gelu  # "none" (exact: exports through Erf) or "tanh"
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        # Not a buffer: traced as a constant, so it is no part of the state_dict.
        self.mask = torch.triu(torch.full((seq, seq), -1e9), 1)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(d // h) + self.mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class Gpt(nn.Module):
    def __init__(self, vocab=32, seq=8, d=16, heads=2, layers=2):
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads, seq, ("none", "tanh")[i % 2]) for i in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        pos = torch.arange(self.seq)
        x = self.tok(ids) + self.pos(pos)
        return self.head(self.ln_f(self.blocks(x)))


# ---- safetensors, by hand (Debian has no python3-safetensors) --------------------
# 8-byte little-endian header length, a JSON header, raw little-endian data.

_DTYPES = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64"}
_TORCH = {v: k for k, v in _DTYPES.items()}
_TORCH["BF16"] = torch.bfloat16  # read only: tessera-train --export-dtype bf16


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        lo, hi = e["data_offsets"]
        buf = bytearray(raw[8 + n + lo:8 + n + hi])
        out[name] = torch.frombuffer(buf, dtype=_TORCH[e["dtype"]]).reshape(e["shape"]).clone()
    return out


# ---- the models of the tests ---------------------------------------------------

def make(kind):
    """The module, one example input and the data: STEPS batches of BATCH in
    order, and one test batch."""
    g = torch.Generator().manual_seed(1)
    n = BATCH * (STEPS + 1)
    if kind == "mlp":
        model, x, y = Mlp(), torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    elif kind == "cnn":
        model, x, y = ResNet(), torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)
    elif kind in ("gpt", "gpt13"):
        model = Gpt()
        x = torch.randint(0, 32, (n, 8), generator=g)
        y = torch.roll(x, -1, dims=1)  # next token
    else:
        raise SystemExit(f"unknown model {kind}")
    return model, x, y


def export(kind, out_dir):
    """gpt13 is the GPT at opset 13, where nn.LayerNorm exports as its
    ReduceMean/Pow/Sqrt expansion; the others use opset 17."""
    torch.manual_seed(0)
    model, x, y = make(kind)
    opset = 13 if kind == "gpt13" else 17
    train_n = BATCH * STEPS
    torch.onnx.export(model, (x[:BATCH],), f"{out_dir}/model.onnx", training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=opset, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}})
    torch.save(model.state_dict(), f"{out_dir}/initial.pt")
    write_safetensors(f"{out_dir}/data.safetensors", {
        "input": x[:train_n], "labels": y[:train_n], "test_input": x[train_n:], "test_labels": y[train_n:]})


if __name__ == "__main__":
    export(sys.argv[2], sys.argv[1])
