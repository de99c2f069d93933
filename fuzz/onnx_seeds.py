"""The seed corpus of fuzz_onnx: small models as PyTorch exports them, in
training mode with a symbolic batch, as the importer takes them (each a few
kilobytes, well under fuzz.sh's 64 KB input limit).

    /usr/bin/python3 fuzz/onnx_seeds.py fuzz/corpus/fuzz_onnx

mlp.onnx       Flatten, Gemm, Relu
cnn.onnx       Conv, BatchNormalization, MaxPool, AveragePool, GlobalAveragePool
gpt17.onnx     the import tests' GPT in miniature at opset 17: Gather lookups,
               LayerNormalization, Split, the reshapes' shape computations,
               batched MatMul, Softmax, Erf and tanh GELU
gpt13.onnx     the same at opset 13, where LayerNorm exports as its expansion
layers.onnx    Slice, Unsqueeze, Squeeze, Concat, Dropout, Sigmoid, Tanh,
               Pow, Div by a constant, LogSoftmax
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx"))
from onnx_models import Gpt  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(2)
        self.pool = nn.MaxPool2d(2, 2)
        self.avg = nn.AvgPool2d(2, 1, count_include_pad=False)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2, 3)

    def forward(self, x):
        x = self.avg(self.pool(F.relu(self.bn(self.conv(x)))))
        return self.fc(torch.flatten(self.gap(x), 1))


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        a = x[:, 1:4].unsqueeze(1).squeeze(1)
        y = torch.cat([torch.sigmoid(a), torch.tanh(x[:, :3])], dim=1)
        y = self.drop(self.fc(y)) ** 2 / 3.0
        return F.log_softmax(y, dim=-1)


def export(model, example, path, opset):
    torch.onnx.export(model, (example,), path, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=opset, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}})


def main(out_dir):
    torch.manual_seed(0)
    os.makedirs(out_dir, exist_ok=True)
    export(Mlp(), torch.randn(2, 8), f"{out_dir}/mlp.onnx", 17)
    export(Cnn(), torch.randn(2, 1, 6, 6), f"{out_dir}/cnn.onnx", 17)
    tokens = torch.randint(0, 16, (2, 4))
    for opset in (17, 13):
        export(Gpt(vocab=16, seq=4, d=8, heads=2, layers=2), tokens, f"{out_dir}/gpt{opset}.onnx", opset)
    export(Layers(), torch.randn(2, 6), f"{out_dir}/layers.onnx", 17)


if __name__ == "__main__":
    main(sys.argv[1])
