#!/usr/bin/env python3
"""An independent safetensors reader, for checking files that Tessera writes.

It shares no code with the C++ reader: only the standard library (struct, json).

    safetensors_check.py FILE [--count N] [--meta KEY=VALUE]... [--expect SPEC]...

SPEC is NAME:DTYPE:SHAPE:VALUES, with SHAPE as extents joined by 'x' ('' for a
scalar) and VALUES comma-separated, e.g. w:F32:2x3:1,2,3,4,5,6.5. Values are
compared bit for bit after packing them as DTYPE. Prints every tensor; exits 1 on
any mismatch and 2 if the file breaks the format.
"""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F64": ("d", 8), "I32": ("i", 4), "I64": ("q", 8),
           "U8": ("B", 1), "I8": ("b", 1), "I16": ("h", 2)}


class FormatError(Exception):
    pass


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise FormatError("key %r appears twice" % k)
    return dict(pairs)


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise FormatError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise FormatError("header length %d past the end of the file" % n)
    if (8 + n) % 8 != 0:
        raise FormatError("data section starts at %d, not 8-byte aligned" % (8 + n))
    text = raw[8:8 + n].decode("utf-8")
    if not text.startswith("{") or text.rstrip(" ") != text.rstrip():
        raise FormatError("header must start with '{' and be padded with spaces only")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    for k, v in meta.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise FormatError("metadata %r is not string to string" % k)
    tensors = {}
    spans = []
    for name, info in header.items():
        if sorted(info) != ["data_offsets", "dtype", "shape"]:
            raise FormatError("%s: fields %s" % (name, sorted(info)))
        fmt, size = FORMATS[info["dtype"]]
        shape = info["shape"]
        begin, end = info["data_offsets"]
        count = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                raise FormatError("%s: bad extent %r" % (name, d))
            count *= d
        if end - begin != count * size or begin < 0 or end > len(data):
            raise FormatError("%s: data_offsets %r do not fit %s%r in %d bytes"
                              % (name, info["data_offsets"], info["dtype"], shape, len(data)))
        if begin % size != 0:
            raise FormatError("%s: offset %d not aligned to %d" % (name, begin, size))
        spans.append((begin, end, name))
        values = list(struct.unpack("<%d%s" % (count, fmt), data[begin:end]))
        tensors[name] = (info["dtype"], shape, values, data[begin:end])
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise FormatError("%s starts at %d, expected %d (gap or overlap)" % (name, begin, at))
        at = end
    if at != len(data):
        raise FormatError("data section has %d bytes, tensors cover %d" % (len(data), at))
    return meta, tensors


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    try:
        meta, tensors = read(path)
    except (FormatError, ValueError, KeyError, TypeError, struct.error) as e:
        print("%s: malformed safetensors file: %s" % (path, e), file=sys.stderr)
        return 2
    for name in sorted(tensors):
        dtype, shape, values, _ = tensors[name]
        print("%s %s %s %s" % (name, dtype, shape, values[:16]))
    print("metadata %s" % json.dumps(meta, sort_keys=True))

    errors = []
    args = argv[2:]
    i = 0
    while i < len(args):
        opt, val = args[i], args[i + 1] if i + 1 < len(args) else None
        i += 2
        if val is None:
            errors.append("option %s needs a value" % opt)
        elif opt == "--count":
            if len(tensors) != int(val):
                errors.append("expected %s tensors, found %d" % (val, len(tensors)))
        elif opt == "--meta":
            key, _, want = val.partition("=")
            if meta.get(key) != want:
                errors.append("metadata %r is %r, expected %r" % (key, meta.get(key), want))
        elif opt == "--expect":
            name, dtype, shape, values = val.split(":")
            shape = [int(d) for d in shape.split("x")] if shape else []
            if name not in tensors:
                errors.append("no tensor %r" % name)
                continue
            got_dtype, got_shape, _, got_bytes = tensors[name]
            if (got_dtype, got_shape) != (dtype, shape):
                errors.append("%s is %s%r, expected %s%r" % (name, got_dtype, got_shape, dtype, shape))
                continue
            fmt, _ = FORMATS[dtype]
            conv = float if fmt in "fd" else int
            want = [conv(v) for v in values.split(",")] if values else []
            if struct.pack("<%d%s" % (len(want), fmt), *want) != got_bytes:
                errors.append("%s holds %r, expected %r" % (name, tensors[name][2], want))
        else:
            errors.append("unknown option %s" % opt)
    for e in errors:
        print("MISMATCH: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
