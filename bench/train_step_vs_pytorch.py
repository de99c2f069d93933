#!/usr/bin/env python3
"""Training-step time of Tessera against PyTorch on the CPU, side by side.

For each model (the MLP 784-1024-1024-10 and the zoo's default CNN, batch 128,
SGD with momentum, fp32) this alternates rounds of Tessera (tessera-train on
synthetic data, step times from its --metrics JSON lines) and PyTorch (the same
architecture, in this process), so both see the same machine load. It reports
the median step time of each and the ratio PyTorch / Tessera (above 1: Tessera
is faster).

Usage: bench/train_step_vs_pytorch.py [--train build/launch/tessera-train]
           [--steps 60] [--warmup 10] [--rounds 3] [--threads N] [--out FILE]
Needs Debian's python3-torch (run it with /usr/bin/python3) and OpenBLAS.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def tessera_times(binary, model, batch, steps, warmup):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        subprocess.run([binary, "--model", model, "--data", "synthetic", "--batch", str(batch),
                        "--steps", str(steps + warmup), "--synthetic-size", str(batch * 8),
                        "--metrics", metrics, "--progress", "none", "--no-eval"],
                       check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(metrics) if l.strip()]
    return [r["step_time_s"] for r in rows if "step" in r][warmup:]


def torch_model(name, torch):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 10)), (784,)
    # The zoo's default cnn: two conv(3x3, same)-bn-relu-maxpool stages, 32 and 64
    # channels, no conv bias, then fc 256 and fc 10.
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, 10)), (1, 28, 28)


def torch_times(torch, name, batch, steps, warmup):
    torch.manual_seed(0)
    model, shape = torch_model(name, torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[warmup:]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", default=os.path.join(here, "..", "build", "launch", "tessera-train"))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", help="also write the results as JSON here")
    a = p.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("train_step_vs_pytorch: PyTorch is missing; install Debian's python3-torch and run "
                 "with /usr/bin/python3")
    if not os.path.exists(a.train):
        sys.exit(f"train_step_vs_pytorch: {a.train} not found; build first (scripts/build.sh)")
    torch.set_num_threads(a.threads)
    results = []
    print(f"PyTorch {torch.__version__} with {torch.get_num_threads()} threads; batch {a.batch}; "
          f"{a.rounds} rounds of {a.steps} steps after {a.warmup} warm-up steps, interleaved")
    for model in ("mlp", "cnn"):
        tt, pt = [], []
        for _ in range(a.rounds):
            tt += tessera_times(a.train, model, a.batch, a.steps, a.warmup)
            pt += torch_times(torch, model, a.batch, a.steps, a.warmup)
        t_med, p_med = statistics.median(tt), statistics.median(pt)
        results.append({"model": model, "batch": a.batch, "tessera_step_s": t_med, "pytorch_step_s": p_med,
                        "pytorch_over_tessera": p_med / t_med})
    print(f"{'model':6} {'tessera ms/step':>16} {'pytorch ms/step':>16} {'pytorch/tessera':>16}")
    for r in results:
        print(f"{r['model']:6} {r['tessera_step_s']*1e3:16.1f} {r['pytorch_step_s']*1e3:16.1f} "
              f"{r['pytorch_over_tessera']:16.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
