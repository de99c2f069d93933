"""bf16 and fp16 against PyTorch (ctest label onnx): one of the ONNX test
models (onnx_models.py: mlp, cnn, gpt), exported from PyTorch and trained 20
steps by tessera-train --precision bf16 (or fp16) with SGD+momentum, against

  autocast   PyTorch 1.13's CPU autocast (torch.autocast("cpu", torch.bfloat16)),
             which casts only matrix products and convolutions;
  emulation  Tessera's own policy written in PyTorch (TesseraPolicy): every
             tensor an operation reads or writes, and every gradient but the
             weights' (summed in f32), rounded to bf16 where Tessera stores
             bf16; f32 master weights.

Bars (docs/training.md, "Precision"):
  * step 1's loss within 1e-2 relative of autocast's;
  * step 1's gradients within 2e-2 of the emulation's and 5e-2 of autocast's
    (each weight's ||g - g_ref|| / ||g_ref||; Tessera's are read from the
    weights after one step: g = (w0 - w1) / lr);
  * every step's loss within max(1e-2, twice autocast's own spread), the
    spread being how far autocast's losses move when the initial weights are
    perturbed by 1e-3 (relative);
  * --export-dtype bf16 writes the checkpoint's weights rounded to bf16, which
    module.to(torch.bfloat16) loads with strict=True.

fp16 (PyTorch 1.13 has no CPU autocast for it) is checked against the
emulation alone, rounding to fp16 and with GradScaler's loss scaling (scale
2^16, a skipped step and a halved scale on an inf or NaN): step 1's loss
within 1e-2 relative, its gradients within 2e-2, and every step's loss within
max(1e-2, twice the emulation's own spread from weights perturbed by 1e-3).

    python3 half_test.py BUILD_DIR WORK_DIR MODEL [bf16|fp16]

Exits 77 (ctest's skip) when PyTorch or ONNX is missing.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_train_test as T  # noqa: E402  (exits 77 without torch or onnx)
import onnx_models as M  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

# The storage type the emulation rounds to (main sets it from the command line).
LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}
low = torch.bfloat16
INITIAL_LOSS_SCALE = 2.0 ** 16  # tessera-train's and GradScaler's default


def loss_f32(logits, y):
    logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def initial_module(kind, work, perturb=0.0):
    torch.manual_seed(0)
    model, x, y = M.make(kind)
    state = torch.load(f"{work}/initial.pt")
    if perturb:
        g = torch.Generator().manual_seed(3)
        state = {k: v * (1 + perturb * torch.randn(v.shape, generator=g)) if v.is_floating_point() else v
                 for k, v in state.items()}
    model.load_state_dict(state, strict=True)
    model.train()
    return model, x, y


def batch(x, y, step):
    rows = slice(step * M.BATCH, (step + 1) * M.BATCH)
    return x[rows], y[rows]


def autocast_training(kind, work, steps, perturb=0.0):
    """Autocast's losses, and its gradients at step 1."""
    model, x, y = initial_module(kind, work, perturb)
    opt = torch.optim.SGD(model.parameters(), lr=T.lr_for(kind), momentum=T.MOMENTUM)
    losses, grads = [], None
    for step in range(steps):
        xb, yb = batch(x, y, step)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_f32(model(xb), yb)
        loss.backward()
        if grads is None:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads


class RoundBoth(torch.autograd.Function):
    """Rounds to the storage type (kept in the tensor's own type) going
    forward, and the gradient coming back."""

    @staticmethod
    def forward(ctx, x):
        return x.to(low).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(low).to(g.dtype)


class RoundForward(torch.autograd.Function):
    """Rounds to the storage type going forward and passes the gradient back unrounded: a
    weight's working copy, whose gradient Tessera computes and sums in f32
    (--grad-reduce-dtype fp32, the default)."""

    @staticmethod
    def forward(ctx, x):
        return x.to(low).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def rounded(v):
    if isinstance(v, torch.nn.Parameter):
        return RoundForward.apply(v)
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return RoundBoth.apply(v)
    if isinstance(v, (tuple, list)):
        return type(v)(rounded(e) for e in v)
    if isinstance(v, dict):
        return {k: rounded(e) for k, e in v.items()}
    return v


class TesseraPolicy(TorchFunctionMode):
    """Tessera's storage types in PyTorch: every floating tensor an operation
    reads or writes is rounded to bf16 (or fp16), and so is every gradient but the
    weights' (each operation still computes in f32). A linear layer or convolution with a
    bias is two operators in Tessera, the product and bias_add, each output
    rounded. Cross-entropy's loss and batch norm's running statistics stay f32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        bias = (args[2] if len(args) > 2 else kwargs.get("bias")) if func in (F.linear, F.conv2d) else None
        if bias is not None:
            args = list(args)
            if len(args) > 2:
                args[2] = None
            else:
                kwargs["bias"] = None
            y = rounded(func(*rounded(args), **rounded(kwargs)))
            shape = [1, -1] + [1] * (y.dim() - 2) if func is F.conv2d else [-1]
            return rounded(y + rounded(bias).reshape(shape))
        if func is F.batch_norm:
            stats, args = list(args[1:3]), list(args[:1]) + list(args[3:])
            args = rounded(args)
            return rounded(func(args[0], *stats, *args[1:], **rounded(kwargs)))
        out = func(*rounded(args), **rounded(kwargs))
        return out if func is F.cross_entropy else rounded(out)


def emulated_step(model, xb, yb, scale):
    """One forward and backward under Tessera's policy (TesseraPolicy), the
    loss's gradient seeded with `scale`; returns the loss and the unscaled
    gradients (multiplied by 1/scale, as Tessera's updates do)."""
    if xb.is_floating_point():
        xb = xb.to(next(model.parameters()).dtype)
    with TesseraPolicy():
        logits = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))
    (loss * scale).backward()
    return loss.item(), {n: p.grad.detach() * (1 / scale) for n, p in model.named_parameters()}


def loss_scale():
    return INITIAL_LOSS_SCALE if low is torch.float16 else 1.0


def emulated_gradients(kind, work, dtype=torch.float32):
    """Step 1's loss and gradients under Tessera's policy, emulated in
    PyTorch with `dtype` arithmetic between the roundings."""
    model, x, y = initial_module(kind, work)
    xb, yb = batch(x, y, 0)
    loss, grads = emulated_step(model.to(dtype), xb, yb, loss_scale())
    return loss, {n: g.float() for n, g in grads.items()}


def emulated_training(kind, work, steps, perturb=0.0):
    """The emulation's losses over `steps` steps of SGD with momentum, with
    GradScaler's rule: a step whose gradients are not all finite is skipped
    and halves the scale (20 steps never reach its growth interval)."""
    model, x, y = initial_module(kind, work, perturb)
    opt = torch.optim.SGD(model.parameters(), lr=T.lr_for(kind), momentum=T.MOMENTUM)
    scale, losses = loss_scale(), []
    for step in range(steps):
        opt.zero_grad()
        loss, grads = emulated_step(model, *batch(x, y, step), scale)
        losses.append(loss)
        if not all(torch.isfinite(g).all() for g in grads.values()):
            scale /= 2
            continue
        for n, p in model.named_parameters():
            p.grad = grads[n]
        opt.step()
    return losses


def largest_difference(got, want):
    """The largest ||g - ref|| / ||ref|| over the weights, and its weight."""
    return max((((got[n] - g).norm() / g.norm().clamp_min(1e-30)).item(), n) for n, g in want.items())


def tessera_gradients(kind, work):
    w0 = torch.load(f"{work}/initial.pt")
    w1 = M.read_safetensors(f"{work}/one/model.safetensors")
    lr = T.lr_for(kind)
    return {n: (w0[n] - w1[n]) / lr for n in w0 if n in w1 and w0[n].is_floating_point()}


def check_gradients(what, got, want, bar):
    worst, name = largest_difference(got, want)
    print(f"step 1 gradients against {what}: {len(want)} weights, largest ||g - ref|| / ||ref|| {worst:.3g} "
          f"({name}; bar {bar:g})")
    if worst > bar:
        sys.exit(f"FAIL: step 1 gradients against {what}")


def check_bf16_export(build, work, kind):
    out = f"{work}/bf16_state.safetensors"
    T.run([f"{build}/launch/tessera-train", "--model", f"{work}/model.onnx", "--checkpoint", f"{work}/one",
           "--export-state-dict", out, "--export-dtype", "bf16"])
    state, masters = M.read_safetensors(out), M.read_safetensors(f"{work}/one/model.safetensors")
    model, _, _ = M.make(kind)
    model.to(torch.bfloat16).load_state_dict(state, strict=True)
    floats = [n for n, t in masters.items() if t.is_floating_point()]
    bad = [n for n in floats if state[n].dtype != torch.bfloat16 or not torch.equal(state[n], masters[n].to(torch.bfloat16))]
    print(f"--export-dtype bf16: load_state_dict(strict=True) into the bf16 module; {len(floats)} floating tensors, "
          f"{len(bad)} not the masters rounded to bf16")
    if bad:
        sys.exit(f"FAIL: --export-dtype bf16: {bad[:3]}")


def check_against_emulation(kind, work, grads):
    """Step 1's gradients against the emulation of Tessera's policy. Where
    16-bit roundings flip on sub-ulp differences (the CNN's batch norms over
    16 samples), the emulation's own f32 and f64 arithmetic part: the bar is
    twice that, if larger than 2e-2. Returns the emulation's step-1 loss."""
    loss, emulated = emulated_gradients(kind, work)
    emulation_spread, weight = largest_difference(emulated, emulated_gradients(kind, work, torch.float64)[1])
    print(f"the emulation's spread between f32 and f64 arithmetic: {emulation_spread:.3g} ({weight})")
    check_gradients("the emulation of Tessera's policy", grads, emulated, max(2e-2, 2 * emulation_spread))
    return loss


def main():
    global low
    build, work, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    precision = sys.argv[4] if len(sys.argv) > 4 else "bf16"
    low = LOW[precision]
    os.makedirs(work, exist_ok=True)
    M.export(kind, work)
    steps = M.STEPS
    T.run(T.tessera_args(build, work, kind, f"{work}/{precision}.jsonl", "--precision", precision, "--no-eval"))
    losses, _, lines = T.read_metrics(f"{work}/{precision}.jsonl")
    args = T.tessera_args(build, work, kind, f"{work}/one.jsonl", "--precision", precision, "--no-eval",
                          "--checkpoint", f"{work}/one")
    args[args.index("--steps") + 1] = "1"
    T.run(args)
    grads = tessera_gradients(kind, work)
    emulated_loss = check_against_emulation(kind, work, grads)
    if precision == "fp16":
        skipped = sum(line.get("step_skipped", False) for line in lines)
        print(f"fp16: {skipped} of {len(lines)} steps skipped for overflow; last loss scale {lines[-1]['loss_scale']:g}")
        T.check_relative("step 1 loss, Tessera fp16 against the emulation", losses[0], emulated_loss, 1e-2)
        reference = emulated_training(kind, work, steps)
        perturbed = emulated_training(kind, work, steps, perturb=1e-3)
        name = "the emulation"
    else:
        reference, autocast_grads = autocast_training(kind, work, steps)
        perturbed, _ = autocast_training(kind, work, steps, perturb=1e-3)
        name = "PyTorch autocast"
        T.check_relative("step 1 loss, Tessera bf16 against PyTorch autocast", losses[0], reference[0], 1e-2)
        check_gradients("PyTorch autocast", grads, autocast_grads, 5e-2)
    spread = max(abs(p - a) / abs(a) for p, a in zip(perturbed, reference))
    print(f"{name}'s spread from weights perturbed by 1e-3: {spread:.3g}")
    T.compare(f"{kind}: Tessera {precision} against {name}", losses, reference, max(1e-2, 2 * spread))
    if precision == "bf16":
        check_bf16_export(build, work, kind)


if __name__ == "__main__":
    main()
