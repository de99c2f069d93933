#!/usr/bin/env python3
"""Prints the README's operator-strategy table from `tessera-plan --ops --format json`.

Usage: tessera-plan --ops --format json | python3 scripts/op_table.py
"""
import json
import sys


def need(n):
    if n["kind"] == "replicated":
        return "rep"
    halo = " ".join(f"{c:+d}{'*' if s else ''}{'*'.join(s)}" for c, s in n["halo"])
    return f"d{n['dim']}" + (f" halo {halo.lstrip('+')}" if halo else "")


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
