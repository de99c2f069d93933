#!/usr/bin/env python3
"""Compares a partitioned tessera-train run against the single-process run.

  compare_runs.py SINGLE.jsonl PARTITIONED.jsonl [--from-step K]
                  [--weights SINGLE.safetensors PARTITIONED.safetensors]
                  [--plan PLAN.json] [--single-cut] [--loss-rtol R] [--weight-tol W]

Checks, and exits 1 naming the first failure:
  - every step both runs logged: loss within 1e-5 relative (--loss-rtol;
    bf16 runs round partial sums to bf16 where one process rounds the whole
    sum once, so they are checked at 1e-3);
  - every step: fp16's loss_scale and step_skipped as in the single process;
  - every partitioned step: comm_bytes (measured by the communicator) equals
    planned_comm_bytes (lowering's count for rank 0);
  - with --plan: comm_bytes equals the plan's rank_comm_bytes[0], and with
    --single-cut the plan's ranks together send exactly comm_bytes (the search's
    own count);
  - with --weights: every weight within 1e-4 (--weight-tol; absolute, or relative for large
    values). Optimizer state (momentum, Adam moments) is only reported: it
    accumulates raw gradients, and a gradient that sums thousands of terms to
    nearly zero (a batch-norm shift) keeps the float32 rounding of the order
    of the sum, which partitioning changes.
"""
import argparse
import json
import struct
import sys
from array import array

LOSS_RTOL = 1e-5
WEIGHT_TOL = 1e-4


def load_steps(path):
    steps = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "step" in j:
                steps[j["step"]] = j
    return steps


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        a = array("f" if info["dtype"] == "F32" else "i")
        a.frombytes(data[lo:hi])
        out[name] = a
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("single")
    p.add_argument("partitioned")
    p.add_argument("--from-step", type=int, default=1)
    p.add_argument("--weights", nargs=2)
    p.add_argument("--plan")
    p.add_argument("--single-cut", action="store_true")
    p.add_argument("--loss-rtol", type=float, default=LOSS_RTOL)
    p.add_argument("--weight-tol", type=float, default=WEIGHT_TOL)
    a = p.parse_args()

    s, q = load_steps(a.single), load_steps(a.partitioned)
    checked = 0
    worst = 0.0
    for step in sorted(q):
        if step < a.from_step:
            continue
        if step not in s:
            sys.exit(f"step {step} is in {a.partitioned} but not in {a.single}")
        x, y = s[step]["loss"], q[step]["loss"]
        rel = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, rel)
        if rel > a.loss_rtol:
            sys.exit(f"step {step}: loss {y} differs from the single-process {x} by {rel:.3g} relative (> {a.loss_rtol})")
        # fp16: the same steps skipped, at the same loss scale.
        for key in ("loss_scale", "step_skipped"):
            if s[step].get(key) != q[step].get(key):
                sys.exit(f"step {step}: {key} {q[step].get(key)}, the single-process run's {s[step].get(key)}")
        if q[step].get("comm_bytes") != q[step].get("planned_comm_bytes"):
            sys.exit(f"step {step}: rank 0 sent {q[step].get('comm_bytes')} bytes, lowering planned "
                     f"{q[step].get('planned_comm_bytes')}")
        checked += 1
    if checked == 0:
        sys.exit(f"no steps to compare in {a.partitioned}")
    msg = f"{checked} steps: losses within {worst:.2e} relative; comm bytes as planned ({q[max(q)]['comm_bytes']}/step on rank 0)"

    if a.plan:
        plan = json.load(open(a.plan))
        ranks = plan["rank_comm_bytes"]
        for step in q:
            if q[step]["comm_bytes"] != ranks[0]:
                sys.exit(f"step {step}: rank 0 sent {q[step]['comm_bytes']} bytes; the plan says {ranks[0]}")
        if a.single_cut and sum(ranks) != plan["comm_bytes"]:
            sys.exit(f"the plan's ranks send {sum(ranks)} bytes in all, but its search counted {plan['comm_bytes']}")
        msg += f"; plan agrees ({sum(ranks)} bytes/step over all ranks, search {plan['comm_bytes']})"

    if a.weights:
        w1, w2 = load_safetensors(a.weights[0]), load_safetensors(a.weights[1])
        if sorted(w1) != sorted(w2):
            sys.exit(f"the checkpoints hold different tensors: {sorted(set(w1) ^ set(w2))[:5]}")
        most = 0.0
        state_most = 0.0
        for name in w1:
            if name.endswith((".momentum", ".adam_m", ".adam_v")):
                for u, v in zip(w1[name], w2[name]):
                    state_most = max(state_most, abs(u - v) / max(1.0, abs(u)))
                continue
            if len(w1[name]) != len(w2[name]):
                sys.exit(f"tensor {name}: {len(w1[name])} vs {len(w2[name])} elements")
            for u, v in zip(w1[name], w2[name]):
                d = abs(u - v) / max(1.0, abs(u))
                if d > a.weight_tol:
                    sys.exit(f"tensor {name}: {v} vs the single-process {u} (difference {d:.3g} > {a.weight_tol})")
                most = max(most, d)
        weights = sum(1 for n in w1 if not n.endswith((".momentum", ".adam_m", ".adam_v")))
        msg += f"; {weights} weights within {most:.2e} (optimizer state within {state_most:.2e})"
    print(msg)


if __name__ == "__main__":
    main()
