#!/usr/bin/env python3
"""Prints the README's operator-strategy table from `tessera-plan --ops --format json`.

Usage: tessera-plan --ops --format json | python3 scripts/op_table.py
"""
import json
import sys


def poly(terms):
    """[[coef, [sym...]], ...] -> "in1.2 - stride_h"."""
    out = ""
    for c, syms in terms:
        mag = abs(c)
        body = "*".join(([str(mag)] if mag != 1 or not syms else []) + syms)
        out += (" - " if c < 0 else " + ") + body if out else ("-" if c < 0 else "") + body
    return out or "0"


def need(n):
    if n["kind"] == "replicated":
        return "rep"
    return f"d{n['dim']}" + (f" halo {poly(n['halo'])}" if n["halo"] else "")


def out(o):
    if o["kind"] == "split":
        return f"d{o['dim']}"
    if o["kind"] == "partial":
        return f"partial {o['reduce']}"
    return "rep"


def main():
    ops = json.load(sys.stdin)
    print("| operator | analysed variant | strategies: split var → inputs ⇒ outputs |")
    print("| --- | --- | --- |")
    for o in ops:
        parts = []
        for s in o["strategies"]:
            red = "; all-reduce " + ", ".join(r["stage"] for r in s["reductions"]) if s["reductions"] else ""
            parts.append(f"**{s['var']}**: ({', '.join(need(n) for n in s['inputs'])}) ⇒ "
                         f"({', '.join(out(x) for x in s['outputs'])}){red}")
        name = o["name"] + (" (opaque)" if o["opaque"] else "")
        print(f"| `{name}` | `{o['variant']}` | {'<br>'.join(parts) or '—'} |")


if __name__ == "__main__":
    main()
