#!/usr/bin/env python3
"""Training throughput of Tessera on a GPU against PyTorch eager, unconstrained and under memory budgets.

For each model (mlp, transformer, wresnet: the zoo's architectures, rebuilt op for
op in PyTorch) this alternates rounds of
  * Tessera: tessera-train --device cuda on synthetic data, SGD with momentum 0.9;
    step times (the executor's time for one training step, excluding the batch
    upload) and footprint_bytes from its --metrics JSON lines, warm-up dropped;
  * PyTorch eager: the same model, batch, optimizer and learning rate, fp32 with TF32
    off, the batch already on the device, each step timed between two
    torch.cuda.synchronize() calls, plus torch.cuda.max_memory_allocated().
Then, unless --skip-budget, for each ratio r in --ratios it runs Tessera with
--device-mem = footprint / r (rounded down to 256 bytes), and PyTorch with
activation offloading (torch.autograd.graph.save_on_cpu(pin_memory=True) around the
forward pass) capped with torch.cuda.set_per_process_memory_fraction(budget /
total GPU memory); a PyTorch run that runs out of memory is reported as OOM.

Every PyTorch measurement runs in a subprocess of its own (this script with
--worker), so that no PyTorch allocation is held while Tessera runs and the memory
fraction, which cannot be raised again in a process, starts fresh each time.

Default specs and batches (a GPU is kept busy; a step takes well under a second),
chosen so that the budgets can run: a budget counts Tessera's 128 MiB of GPU
workspaces, and none can be below the largest operator's inputs and outputs
(the first GPU run's shapes, a 4-layer MLP at batch 4096 and a 12-layer
transformer with a 32000-word vocabulary, could not run 1/8 or 1/12). The MLP
and the transformer run every budget down to 1/12; the wide ResNet down to 1/8
(2.03 GiB; its smallest budget is 108 MiB beside the workspaces):
  mlp          mlp:layers=32,hidden=4096,input=4096,classes=10                batch 1024
  transformer  transformer:layers=24,d_model=768,heads=12,seq=256,vocab=8000  batch 16
  wresnet      wresnet:depth=50,width=2,image=64,classes=10                  batch 64
The learning rate is 0.001 by default: the 32-layer MLP diverges at 0.05.
Synthetic data is one batch per epoch (--synthetic-batches), since Tessera labels
f32 synthetic data with a dense teacher whose cost grows with the dataset.

The parameter count of each PyTorch model is checked against Tessera's graph
(TESSERA_LOG=graph lists every parameter); a mismatch stops the script.

Usage: bench/gpu_vs_pytorch.py --train build/launch/tessera-train [--models mlp,transformer,wresnet]
           [--steps 30] [--warmup 5] [--rounds 2] [--ratios 2,4,8,12] [--skip-budget] [--out FILE]
Smoke test without a GPU: --device cpu with tiny --spec-*/--batch-* values.
Each budgeted Tessera run first profiles and searches its swap plan (up to
tessera-train's --swap-time-limit, 30 s by default; pass a lower --swap-time-limit
here), and each PyTorch worker pays for importing torch and starting CUDA, so a
full run takes many minutes: under a per-command limit, run one model per call.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("mlp", "transformer", "wresnet")
DEFAULT_SPECS = {
    "mlp": "mlp:layers=32,hidden=4096,input=4096,classes=10",
    "transformer": "transformer:layers=24,d_model=768,heads=12,seq=256,vocab=8000",
    "wresnet": "wresnet:depth=50,width=2,image=64,classes=10",
}
DEFAULT_BATCHES = {"mlp": 1024, "transformer": 16, "wresnet": 64}
PROG = "gpu_vs_pytorch"


class BenchError(Exception):
    pass


# ---------------------------------------------------------------------------
# Model specs: the zoo's parameters and defaults (models/src/*.cpp).

ZOO_DEFAULTS = {
    "mlp": {"layers": 3, "hidden": 1024, "input": 784, "classes": 10},
    "transformer": {"layers": 2, "d_model": 128, "heads": 4, "seq": 32, "vocab": 1000, "ffn": None},
    "wresnet": {"depth": 50, "width": 1, "image": 32, "channels": 3, "classes": 10, "base": 64},
}
WRESNET_BLOCKS = {18: (False, (2, 2, 2, 2)), 34: (False, (3, 4, 6, 3)), 50: (True, (3, 4, 6, 3)),
                  101: (True, (3, 4, 23, 3)), 152: (True, (3, 8, 36, 3))}


def parse_spec(text, expect):
    """'name:k=v,...' -> the zoo's parameters with defaults filled in."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if name != expect:
        raise BenchError(f"--spec-{expect} '{text}' is a '{name}' spec; give {expect}:key=value,...")
    params = dict(ZOO_DEFAULTS[name])
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in params:
            raise BenchError(f"--spec-{expect} '{text}': '{item}' is not key=value with a key among "
                             f"{', '.join(params)}")
        try:
            params[key] = int(value)
        except ValueError:
            raise BenchError(f"--spec-{expect} '{text}': {key} = '{value}' is not an integer") from None
    if name == "transformer":
        if params["ffn"] is None:
            params["ffn"] = 4 * params["d_model"]
        if params["d_model"] % params["heads"]:
            raise BenchError(f"--spec-transformer '{text}': heads = {params['heads']} does not divide "
                             f"d_model = {params['d_model']}")
    if name == "wresnet" and params["depth"] not in WRESNET_BLOCKS:
        raise BenchError(f"--spec-wresnet '{text}': depth {params['depth']} is not one of "
                         f"{', '.join(map(str, WRESNET_BLOCKS))}")
    return params


# ---------------------------------------------------------------------------
# PyTorch models: the zoo's graphs, layer for layer (same parameters, same ops).

def build_torch_model(torch, name, p, attention):
    nn, F = torch.nn, torch.nn.functional

    if name == "mlp":
        # models/src/mlp.cpp: linear layers with bias, ReLU between them, none after the last.
        layers, width = [], p["input"]
        for i in range(1, p["layers"] + 1):
            out = p["classes"] if i == p["layers"] else p["hidden"]
            layers.append(nn.Linear(width, out))
            if i != p["layers"]:
                layers.append(nn.ReLU())
            width = out
        return nn.Sequential(*layers)

    if name == "transformer":
        # models/src/transformer.cpp: pre-norm blocks; separate q, k, v and proj
        # linears with bias; scores scaled by 1/sqrt(head_dim) plus a causal mask;
        # gelu (tanh approximation); the residual stream kept as [batch*seq, d].
        d, h, seq, ffn = p["d_model"], p["heads"], p["seq"], p["ffn"]
        dh = d // h

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                # Registered in the zoo's order, so parameters() lines up with its graph.
                self.ln1 = nn.LayerNorm(d)
                self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
                self.ln2 = nn.LayerNorm(d)
                self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

            def forward(self, x, mask, batch):
                a = self.ln1(x)
                # [batch*seq, d] -> [batch, heads, seq, dh]
                q, k, v = (t.view(batch, seq, h, dh).permute(0, 2, 1, 3) for t in (self.q(a), self.k(a), self.v(a)))
                if attention == "sdpa":
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    q, k, v = (t.reshape(batch * h, seq, dh) for t in (q, k, v))
                    scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(dh))
                    o = torch.bmm(torch.softmax(scores + mask, dim=-1), v).view(batch, h, seq, dh)
                x = x + self.proj(o.permute(0, 2, 1, 3).reshape(batch * seq, d))
                return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

        class Transformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok_embed = nn.Parameter(torch.randn(p["vocab"], d) * 0.02)
                self.pos_embed = nn.Parameter(torch.randn(seq, d) * 0.02)
                self.blocks = nn.ModuleList(Block() for _ in range(p["layers"]))
                self.ln_f = nn.LayerNorm(d)
                self.out = nn.Linear(d, p["vocab"])
                # The zoo's mask constant: 0 on and below the diagonal, -1e9 above.
                self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), diagonal=1))

            def forward(self, ids):
                batch = ids.shape[0]
                x = (F.embedding(ids, self.tok_embed) + self.pos_embed).reshape(batch * seq, d)
                for blk in self.blocks:
                    x = blk(x, self.mask, batch)
                return self.out(self.ln_f(x))

        return Transformer()

    # wresnet (models/src/wresnet.cpp): every conv bias-free, padded kernel//2, then
    # batch norm over batch statistics (the zoo keeps no running statistics).
    def conv_bn(ci, co, k, stride, relu):
        mods = [nn.Conv2d(ci, co, k, stride=stride, padding=k // 2, bias=False),
                nn.BatchNorm2d(co, track_running_stats=False)]
        return nn.Sequential(*(mods + [nn.ReLU()] if relu else mods))

    class Block(nn.Module):
        def __init__(self, ci, inner, stride, bottleneck):
            super().__init__()
            out = 4 * inner if bottleneck else inner
            if bottleneck:
                self.body = nn.Sequential(conv_bn(ci, inner, 1, 1, True), conv_bn(inner, inner, 3, stride, True),
                                          conv_bn(inner, out, 1, 1, False))
            else:
                self.body = nn.Sequential(conv_bn(ci, inner, 3, stride, True), conv_bn(inner, inner, 3, 1, False))
            self.shortcut = conv_bn(ci, out, 1, stride, False) if stride != 1 or ci != out else nn.Identity()
            self.out = out

        def forward(self, x):
            return torch.relu(self.body(x) + self.shortcut(x))

    class WResNet(nn.Module):
        def __init__(self):
            super().__init__()
            c, img, base = p["channels"], p["image"], p["base"]
            self.shape = (c, img, img)
            if img >= 64:
                self.stem = nn.Sequential(conv_bn(c, base, 7, 2, True), nn.MaxPool2d(3, 2, 1))
            else:
                self.stem = conv_bn(c, base, 3, 1, True)
            bottleneck, counts = WRESNET_BLOCKS[p["depth"]]
            blocks, ch = [], base
            for s, n in enumerate(counts):
                inner = (base * p["width"]) << s
                for i in range(n):
                    blocks.append(Block(ch, inner, 2 if s > 0 and i == 0 else 1, bottleneck))
                    ch = blocks[-1].out
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(ch, p["classes"])

        def forward(self, x):
            h = self.blocks(self.stem(x.view(x.shape[0], *self.shape)))
            return self.fc(h.mean(dim=(2, 3)))

    return WResNet()


def make_batch(torch, name, p, batch, device):
    """Random inputs and labels with the zoo's shapes (f32 features or i32 token ids)."""
    g = torch.Generator().manual_seed(1)
    if name == "transformer":
        ids = torch.randint(0, p["vocab"], (batch, p["seq"]), generator=g)
        labels = torch.randint(0, p["vocab"], (batch * p["seq"],), generator=g)
        return ids.to(device), labels.to(device)
    features = p["input"] if name == "mlp" else p["channels"] * p["image"] ** 2
    x = torch.randn(batch, features, generator=g)
    return x.to(device), torch.randint(0, p["classes"], (batch,), generator=g).to(device)


def torch_worker(job):
    """One PyTorch measurement; returns a dict (printed as JSON by --worker)."""
    import contextlib
    import torch

    dev = torch.device(job["device"])
    cuda = dev.type == "cuda"
    result = {"torch": torch.__version__}
    precision = job.get("precision", "fp32")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        props = torch.cuda.get_device_properties(dev)
        result.update(gpu=torch.cuda.get_device_name(dev), total_gpu_bytes=props.total_memory,
                      cuda=torch.version.cuda)
        if job.get("fraction") is not None:
            # Before any allocation: the cap covers everything the caching allocator holds.
            # The cap wants a device index; torch.device("cuda") has none.
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            torch.cuda.set_per_process_memory_fraction(job["fraction"], index)
    if job["kind"] == "probe":
        return result
    oom_types = tuple(t for t in (getattr(torch.cuda, "OutOfMemoryError", None),) if t) or (RuntimeError,)

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    name, p, batch = job["model"], job["params"], job["batch"]
    torch.manual_seed(0)
    step_i = -1
    try:
        model = build_torch_model(torch, name, p, job["attention"])
        result["params"] = sum(t.numel() for t in model.parameters())
        if job["kind"] == "params":
            return result
        model = model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=job["lr"], momentum=job["momentum"])
        x, y = make_batch(torch, name, p, batch, dev)
        if job["offload"]:
            offload = lambda: torch.autograd.graph.save_on_cpu(pin_memory=cuda)  # noqa: E731
        else:
            offload = contextlib.nullcontext
        low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        # autocast as its users run it: fp32 weights, the low type where autocast's lists put it.
        autocast = (lambda: torch.autocast(dev.type, dtype=low)) if low else contextlib.nullcontext  # noqa: E731
        times, losses = [], []
        sync()
        for step_i in range(job["warmup"] + job["steps"]):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with offload(), autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())  # after the timer: Tessera's step time excludes reading the loss too
        result.update(step_times_s=times[job["warmup"]:], losses=losses)
        if not all(math.isfinite(v) for v in losses):
            result["warning"] = "non-finite loss"
    except oom_types as e:
        if "out of memory" not in str(e).lower():
            raise
        result.update(oom=True, oom_step=step_i + 1, message=str(e).splitlines()[0][:300])
    if cuda:
        result.update(max_allocated_bytes=torch.cuda.max_memory_allocated(dev),
                      max_reserved_bytes=torch.cuda.max_memory_reserved(dev))
    return result


def run_worker(job, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"the PyTorch worker for {job.get('model', 'the probe')} ran past {timeout} s") from None
    lines = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        raise BenchError(f"the PyTorch worker ({job['kind']} {job.get('model', '')}) failed with exit "
                         f"{r.returncode}:\n{r.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


# ---------------------------------------------------------------------------
# Tessera.

PARAM_LINE = re.compile(r"^param \S+ f32\[([0-9, ]*)\]")


def tessera_run(a, spec, batch, device_mem=None, count_params=False):
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "metrics.jsonl")
        cmd = [a.train, "--device", a.device, "--model", spec, "--data", "synthetic", "--batch", str(batch),
               "--steps", str(a.warmup + a.steps), "--synthetic-size", str(batch * a.synthetic_batches),
               "--metrics", metrics, "--progress", "none", "--no-eval", "--optimizer", "sgd",
               "--lr", str(a.lr), "--lr-schedule", "constant", "--momentum", str(a.momentum)]
        if device_mem is not None:
            cmd += ["--device-mem", f"{device_mem}B"]
            if a.swap_time_limit is not None:
                cmd += ["--swap-time-limit", str(a.swap_time_limit)]
        env = dict(os.environ)
        if count_params:
            env["TESSERA_LOG"] = "graph"
        else:
            env.pop("TESSERA_LOG", None)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{' '.join(cmd)} ran past {a.timeout} s") from None
        if r.returncode != 0:
            err = "\n".join(l for l in r.stderr.splitlines() if not l.startswith(("param ", "data ")))
            raise BenchError(f"{' '.join(cmd)} failed with exit {r.returncode}:\n{err[-3000:]}\n{r.stdout[-1000:]}")
        rows = [json.loads(l) for l in open(metrics) if l.strip()]
    rows = [row for row in rows if "step_time_s" in row]
    if len(rows) != a.warmup + a.steps:
        raise BenchError(f"{' '.join(cmd)} wrote {len(rows)} step lines, expected {a.warmup + a.steps}")
    out = r.stdout.splitlines()
    res = {"command": cmd, "device_line": out[0] if out else "", "summary_line": out[1] if len(out) > 1 else "",
           "step_times_s": [row["step_time_s"] for row in rows[a.warmup:]],
           "losses": [row["loss"] for row in rows],
           "footprint_bytes": rows[-1]["footprint_bytes"], "arena_bytes": rows[-1]["arena_bytes"],
           "peak_device_bytes": max(row["peak_device_bytes"] for row in rows),
           "swap_in_bytes": rows[-1]["swap_in_bytes"], "swap_out_bytes": rows[-1]["swap_out_bytes"]}
    pred = [row["predicted_step_time_s"] for row in rows[a.warmup:] if "predicted_step_time_s" in row]
    if pred:
        res["predicted_step_time_s"] = statistics.median(pred)
    if count_params:
        res["params"] = sum(math.prod(int(v) for v in m.group(1).split(",") if v.strip())
                            for m in map(PARAM_LINE.match, r.stderr.splitlines()) if m)
    if a.device == "cuda" and "cuda" not in res["device_line"]:
        raise BenchError(f"tessera-train did not run on the GPU; its first line: {res['device_line']!r}")
    return res


# ---------------------------------------------------------------------------
# The measurement.

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def torch_job(a, name, params, batch, **extra):
    job = {"kind": "time", "device": a.device, "model": name, "params": params, "batch": batch,
           "steps": a.steps, "warmup": a.warmup, "lr": a.lr, "momentum": a.momentum,
           "attention": a.torch_attention, "offload": False, "fraction": None}
    job.update(extra)
    return job


def measure_model(a, name, total_gpu_bytes, log):
    spec, batch = getattr(a, f"spec_{name}"), getattr(a, f"batch_{name}")
    params = parse_spec(spec, name)
    res = {"model": name, "spec": spec, "batch": batch}
    t_times, p_times, other_times = [], [], {}
    for rnd in range(a.rounds):
        t = tessera_run(a, spec, batch, count_params=rnd == 0)
        if rnd == 0:
            res.update(tessera_params=t["params"], footprint_bytes=t["footprint_bytes"],
                       tessera_arena_bytes=t["arena_bytes"], tessera_peak_device_bytes=t["peak_device_bytes"],
                       tessera_device_line=t["device_line"], tessera_summary_line=t["summary_line"],
                       tessera_losses_round1=t["losses"])
        t_times += t["step_times_s"]
        p = run_worker(torch_job(a, name, params, batch), a.timeout)
        if p.get("oom"):
            raise BenchError(f"PyTorch ran out of memory on {spec} batch {batch} without a cap: {p['message']}; "
                             f"lower --batch-{name}")
        if rnd == 0:
            res.update(pytorch_params=p["params"], pytorch_max_allocated_bytes=p.get("max_allocated_bytes"),
                       pytorch_max_reserved_bytes=p.get("max_reserved_bytes"), pytorch_losses_round1=p["losses"])
            if p["params"] != t["params"]:
                raise BenchError(f"{spec}: the PyTorch model has {p['params']} parameters but Tessera's graph "
                                 f"has {t['params']}; the two architectures differ")
        p_times += p["step_times_s"]
        for prec in a.torch_precisions:
            q = run_worker(torch_job(a, name, params, batch, precision=prec), a.timeout)
            if q.get("oom"):
                raise BenchError(f"PyTorch {prec} ran out of memory on {spec} batch {batch}: {q['message']}")
            other_times.setdefault(prec, []).extend(q["step_times_s"])
        log(f"  {name} round {rnd + 1}: tessera {med(t['step_times_s']) * 1e3:.2f} ms/step, "
            f"pytorch {med(p['step_times_s']) * 1e3:.2f} ms/step" +
            "".join(f", pytorch {k} {med(v) * 1e3:.2f} ms/step" for k, v in other_times.items()))
    res.update(tessera_step_s=med(t_times), pytorch_step_s=med(p_times), tessera_step_times_s=t_times,
               pytorch_step_times_s=p_times)
    res["pytorch_other_precisions"] = {k: {"step_s": med(v), "step_times_s": v, "samples_per_s": batch / med(v)}
                                       for k, v in other_times.items()}
    res["tessera_samples_per_s"] = batch / res["tessera_step_s"]
    res["pytorch_samples_per_s"] = batch / res["pytorch_step_s"]
    res["tessera_over_pytorch"] = res["tessera_samples_per_s"] / res["pytorch_samples_per_s"]

    res["budgets"] = []
    if a.skip_budget:
        return res
    for r in a.ratios:
        budget = res["footprint_bytes"] // r // 256 * 256
        b = {"ratio": r, "budget_bytes": budget}
        # Only a fraction of the GPU can be capped; on the CPU the cap is skipped.
        fraction = budget / total_gpu_bytes if total_gpu_bytes else None
        b["pytorch_memory_fraction"] = fraction
        bt, bp, oom = [], [], None
        for rnd in range(a.budget_rounds):
            try:
                t = tessera_run(a, spec, batch, device_mem=budget)
            except BenchError as e:
                # A budget below what a single operator needs is a result, not a crash.
                b["tessera_error"] = str(e)
                log(f"  {name} budget 1/{r}: tessera-train failed: {str(e).splitlines()[1:2]}")
                break
            bt += t["step_times_s"]
            b.update(tessera_arena_bytes=t["arena_bytes"], tessera_swap_in_bytes=t["swap_in_bytes"],
                     tessera_swap_out_bytes=t["swap_out_bytes"],
                     tessera_predicted_step_s=t.get("predicted_step_time_s"))
            if oom is None:
                p = run_worker(torch_job(a, name, params, batch, offload=True, fraction=fraction), a.timeout)
                if p.get("oom"):
                    oom = p["message"]
                    b["pytorch_oom_step"] = p["oom_step"]
                else:
                    bp += p["step_times_s"]
                    b["pytorch_max_allocated_bytes"] = p.get("max_allocated_bytes")
            msg = f"pytorch+save_on_cpu {med(bp) * 1e3:.2f} ms/step" if oom is None else "pytorch+save_on_cpu OOM"
            log(f"  {name} budget 1/{r} ({budget} bytes) round {rnd + 1}: tessera {med(t['step_times_s']) * 1e3:.2f}"
                f" ms/step, {msg}")
        if "tessera_error" in b:
            res["budgets"].append(b)
            continue
        b.update(tessera_step_s=med(bt), tessera_step_times_s=bt)
        b["tessera_samples_per_s"] = batch / b["tessera_step_s"]
        b["of_unconstrained"] = b["tessera_samples_per_s"] / res["tessera_samples_per_s"]
        if oom is None:
            b.update(pytorch_step_s=med(bp), pytorch_step_times_s=bp, pytorch_samples_per_s=batch / med(bp))
            b["tessera_over_pytorch"] = b["tessera_samples_per_s"] / b["pytorch_samples_per_s"]
        else:
            b.update(pytorch_oom=True, pytorch_oom_message=oom)
        res["budgets"].append(b)
    return res


def mib(n):
    return f"{n / 2**20:.1f} MiB" if n is not None else "-"


def tables(results):
    lines = ["| model | batch | Tessera samples/s | PyTorch samples/s | Tessera / PyTorch | Tessera footprint "
             "| PyTorch max allocated |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['spec']} | {r['batch']} | {r['tessera_samples_per_s']:.1f} | "
                     f"{r['pytorch_samples_per_s']:.1f} | {r['tessera_over_pytorch']:.2f} | "
                     f"{mib(r['footprint_bytes'])} | {mib(r['pytorch_max_allocated_bytes'])} |")
    others = sorted({k for r in results for k in r.get("pytorch_other_precisions", {})})
    if others:
        lines += ["", "PyTorch in other precisions (Tessera is fp32 here; tf32: allow_tf32 on; bf16: "
                  "torch.autocast(dtype=torch.bfloat16) with fp32 weights):", "",
                  "| model | batch | PyTorch fp32 samples/s | " +
                  " | ".join(f"PyTorch {k} samples/s | {k} / fp32" for k in others) + " | Tessera fp32 / PyTorch " +
                  " / ".join(others) + " |", "| --- | ---: | ---: | " + " | ".join("---: | ---:" for _ in others) +
                  " | ---: |"]
        for r in results:
            o = r["pytorch_other_precisions"]
            cells = [f"{o[k]['samples_per_s']:.1f} | {o[k]['samples_per_s'] / r['pytorch_samples_per_s']:.2f}"
                     for k in others]
            ratios = " / ".join(f"{r['tessera_samples_per_s'] / o[k]['samples_per_s']:.2f}" for k in others)
            lines.append(f"| {r['spec']} | {r['batch']} | {r['pytorch_samples_per_s']:.1f} | " + " | ".join(cells) +
                         f" | {ratios} |")
    if any(r["budgets"] for r in results):
        lines += ["", "| model | budget (1/r) | Tessera samples/s | of unconstrained | PyTorch+save_on_cpu samples/s "
                  "| Tessera / PyTorch |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        for r in results:
            for b in r["budgets"]:
                if "tessera_error" in b:
                    lines.append(f"| {r['model']} | 1/{b['ratio']} ({mib(b['budget_bytes'])}) | tessera-train failed "
                                 f"(see the JSON) | - | - | - |")
                    continue
                pt = "OOM" if b.get("pytorch_oom") else f"{b['pytorch_samples_per_s']:.1f}"
                ratio = "-" if b.get("pytorch_oom") else f"{b['tessera_over_pytorch']:.2f}"
                lines.append(f"| {r['model']} | 1/{b['ratio']} ({mib(b['budget_bytes'])}) | "
                             f"{b['tessera_samples_per_s']:.1f} | {b['of_unconstrained']:.2f} | {pt} | {ratio} |")
    return "\n".join(lines)


def precision_list(text):
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in ("tf32", "bf16")]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown precision '{bad[0]}' in '{text}'; valid: tf32, bf16")
    return vals


def positive_list(text):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers, e.g. 2,4,8,12")
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"'{text}' must list positive integers, e.g. 2,4,8,12")
    return vals


def model_list(text):
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"unknown model(s) {', '.join(bad) or '(none)'} in '{text}'; "
                                         f"valid: {','.join(MODELS)}")
    return names


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--train", default=os.path.join(here, "..", "build", "launch", "tessera-train"),
                   help="tessera-train binary (default: build/launch/tessera-train)")
    p.add_argument("--models", type=model_list, default=list(MODELS), help="comma-separated subset of "
                   + ",".join(MODELS))
    for m in MODELS:
        p.add_argument(f"--spec-{m}", default=DEFAULT_SPECS[m], help=f"zoo spec (default {DEFAULT_SPECS[m]})")
        p.add_argument(f"--batch-{m}", type=positive_int, default=DEFAULT_BATCHES[m],
                       help=f"batch size (default {DEFAULT_BATCHES[m]})")
    p.add_argument("--steps", type=positive_int, default=30, help="timed steps per run (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them (default 5)")
    p.add_argument("--rounds", type=positive_int, default=2, help="alternating rounds, unconstrained (default 2)")
    p.add_argument("--budget-rounds", type=positive_int, default=1,
                   help="alternating rounds per budget (default 1: each Tessera run plans its swaps first)")
    p.add_argument("--ratios", type=positive_list, default=[2, 4, 8, 12], help="budgets footprint/r (default 2,4,8,12)")
    p.add_argument("--skip-budget", action="store_true", help="only the unconstrained comparison")
    p.add_argument("--lr", type=float, default=0.001, help="SGD learning rate for both (default 0.001)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum for both (default 0.9)")
    p.add_argument("--swap-time-limit", type=float, help="passed to tessera-train for budget runs "
                   "(default: tessera-train's own)")
    p.add_argument("--synthetic-batches", type=positive_int, default=1,
                   help="synthetic training set size in batches (default 1)")
    p.add_argument("--torch-attention", choices=("math", "sdpa"), default="math",
                   help="PyTorch attention: math (bmm, softmax, bmm: the zoo's graph) or sdpa "
                        "(F.scaled_dot_product_attention, causal)")
    p.add_argument("--torch-precisions", type=precision_list, default=[],
                   help="also time PyTorch in these precisions, comma-separated: tf32, bf16 (autocast) (default none)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (the measurement) or cpu (a smoke test of the plumbing, with tiny specs)")
    p.add_argument("--out", help="write every number as JSON here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.warmup < 0:
        p.error(f"--warmup must be non-negative, got {a.warmup}")
    if not a.worker:
        for m in a.models:
            try:
                parse_spec(getattr(a, f"spec_{m}"), m)
            except BenchError as e:
                p.error(str(e))
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.worker:
        print("RESULT " + json.dumps(torch_worker(json.loads(a.worker))), flush=True)
        return 0
    try:
        import torch  # noqa: F401  (only to fail early; all CUDA work happens in the workers)
    except ImportError:
        sys.exit(f"{PROG}: PyTorch is not importable by {sys.executable}; install it (pip install torch) or run "
                 f"with a Python that has it")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{PROG}: PyTorch {torch.__version__} sees no CUDA device (torch.version.cuda = "
                 f"{torch.version.cuda}); run on a GPU machine, or pass --device cpu for a smoke test")
    a.train = os.path.abspath(a.train)
    if not os.access(a.train, os.X_OK):
        sys.exit(f"{PROG}: tessera-train not found at {a.train}; build it (ninja -C build tessera-train) or "
                 f"pass --train PATH")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    try:
        probe = run_worker({"kind": "probe", "device": a.device}, a.timeout)
        gpu = probe.get("gpu", "cpu (smoke test)")
        total = probe.get("total_gpu_bytes")
        print(f"GPU: {gpu}" + (f", {total / 2**30:.1f} GiB, CUDA {probe['cuda']}" if total else ""), flush=True)
        print(f"PyTorch {probe['torch']} eager, fp32, TF32 off, SGD momentum {a.momentum} lr {a.lr}; "
              f"{a.rounds} alternating rounds of {a.steps} timed steps after {a.warmup} warm-up steps; "
              f"attention: {a.torch_attention}", flush=True)
        results = []
        for name in a.models:
            log(f"{name}: {getattr(a, f'spec_{name}')} batch {getattr(a, f'batch_{name}')}")
            results.append(measure_model(a, name, total, log))
    except BenchError as e:
        sys.exit(f"{PROG}: {e}")
    print()
    print(tables(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"gpu": gpu, "total_gpu_bytes": total, "torch": probe["torch"], "cuda": probe.get("cuda"),
                       "settings": {k: getattr(a, k) for k in ("steps", "warmup", "rounds", "budget_rounds", "ratios",
                                                               "lr", "momentum", "torch_attention", "device", "torch_precisions",
                                                               "swap_time_limit", "synthetic_batches")},
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
