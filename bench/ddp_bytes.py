#!/usr/bin/env python3
"""Bytes a step moves: `data` (DDP) and Tofu's plan against DDP's closed form.

For every model and device count, plans with `tessera-plan --executable` and
compares the bytes with DDP's ring all-reduce of every weight's gradient,
2(N-1) x the weights' bytes in all (2(N-1)/N per rank), plus the 4-byte mean
loss. `data` synchronises batch norm: it all-reduces the statistics inside the
operator (`stats`, apart), which leaves gamma's and beta's gradients whole, so
those two are not in the form. `act` is what moves for anything but a gradient,
the loss or a statistic: 0 for DDP. Every count is what lowering sends
(`comm_bytes` of an executable plan); `tofu search` is what Tofu's recursion
counted, which differs over several cuts.

Usage: bench/ddp_bytes.py [--plan build/launch/tessera-plan] [--batch 64]
       [--devices 2,4,8] [MODEL ...]
"""
import argparse
import json
import subprocess
import sys

MODELS = ["mlp", "cnn", "wresnet:depth=50", "lstm", "transformer",
          "transformer:layers=2,d_model=768,heads=12,seq=256,vocab=8000"]


def plan(tool, model, batch, n, strategy):
    out = subprocess.run([tool, "--model", model, "--batch", str(batch), "--devices", str(n), "--strategy",
                          strategy, "--executable", "--format", "json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def split_bytes(p):
    """(gradient + loss, statistics, anything else) bytes of a plan's steps."""
    roles = {t["tensor"]: t["role"] for t in p["tensors"]}
    grad = stats = other = 0
    for s in p["comm"]:
        if s["what"].startswith("inside the operator"):
            stats += s["bytes"]
        elif roles.get(s["tensor"]) == "gradient" or s["tensor"] == "loss":
            grad += s["bytes"]
        else:
            other += s["bytes"]
    return grad, stats, other


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", default="build/launch/tessera-plan")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--devices", default="2,4,8")
    ap.add_argument("models", nargs="*", default=MODELS)
    a = ap.parse_args()
    print(f"{'model':58} {'N':>2} {'DDP form':>13} {'data':>13} {'stats':>11} {'act':>5} {'tofu':>13} "
          f"{'tofu/form':>9} {'tofu search':>13}")
    ok = True
    for model in a.models:
        for n in map(int, a.devices.split(",")):
            data = plan(a.plan, model, a.batch, n, "data")
            tofu = plan(a.plan, model, a.batch, n, "tofu")
            bn = {name for op in data["ops"] if op["op"] == "batch_norm" for name in op["inputs"][1:3]}
            weights = sum(t["bytes"] for t in data["tensors"] if t["role"] == "param" and t["tensor"] not in bn)
            form = 2 * (n - 1) * (weights + 4)
            grad, stats, other = split_bytes(data)
            ok = ok and grad == form and other == 0 and tofu["comm_bytes"] <= data["comm_bytes"]
            print(f"{model:58} {n:>2} {form:>13,} {grad:>13,} {stats:>11,} {other:>5} {tofu['comm_bytes']:>13,} "
                  f"{tofu['comm_bytes'] / form:>9.3f} {tofu['search_bytes']:>13,}")
    print("every data plan is DDP and every Tofu plan moves at most data's bytes" if ok else "BAR NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
