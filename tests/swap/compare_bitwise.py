#!/usr/bin/env python3
"""Checks that a swapped tessera-train run equals the unconstrained run bit for bit.

  compare_bitwise.py FULL.jsonl SWAPPED.jsonl FULL.safetensors SWAPPED.safetensors

Exits 1 naming the first difference:
  - every step's loss is the same float (the metrics hold it exactly);
  - every tensor of the final checkpoint (weights, optimizer state) has the
    same bytes;
  - every swapped step stayed inside its arena: arena_high_water and
    peak_device_bytes at most arena_bytes, and the arena below the footprint.
Prints the memory ratio (footprint / arena) and the swap bytes per step.
"""
import json
import struct
import sys


def steps(path):
    out = {}
    for line in open(path):
        j = json.loads(line)
        if "step" in j:
            out[j["step"]] = j
    return out


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}


def main():
    full, swapped = steps(sys.argv[1]), steps(sys.argv[2])
    if sorted(full) != sorted(swapped) or not full:
        sys.exit(f"steps differ: {sorted(full)} vs {sorted(swapped)}")
    for s in sorted(full):
        a, b = full[s], swapped[s]
        if a["loss"] != b["loss"]:
            sys.exit(f"step {s}: loss {a['loss']!r} unconstrained but {b['loss']!r} swapped")
        if b["arena_high_water"] > b["arena_bytes"] or b["peak_device_bytes"] > b["arena_bytes"]:
            sys.exit(f"step {s}: touched {b['arena_high_water']} bytes, {b['peak_device_bytes']} live, "
                     f"but the arena is {b['arena_bytes']}")
    last = swapped[max(swapped)]
    if last["arena_bytes"] >= last["footprint_bytes"]:
        sys.exit(f"the swapped run's arena {last['arena_bytes']} is not below its footprint {last['footprint_bytes']}")
    ta, tb = tensors(sys.argv[3]), tensors(sys.argv[4])
    if sorted(ta) != sorted(tb):
        sys.exit(f"checkpoint tensors differ: {sorted(set(ta) ^ set(tb))}")
    for k in sorted(ta):
        if ta[k] != tb[k]:
            sys.exit(f"tensor '{k}' differs after step {max(full)}")
    ratio = last["footprint_bytes"] / last["arena_bytes"]
    print(f"{len(full)} steps bit-identical, {len(ta)} tensors; needs {ratio:.1f}x the arena; "
          f"per step {last['swap_out_bytes']} B out, {last['swap_in_bytes']} B in; "
          f"predicted {last.get('predicted_step_time_s', 0) * 1e3:.2f} ms, measured {last['step_time_s'] * 1e3:.2f} ms")


main()
