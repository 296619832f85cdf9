"""Trains a small GPT twice, once on flashattn.sdpa and once on PyTorch's SDPA, and compares.

A character-level (byte-level) decoder-only transformer learns to continue Python source: the
corpus is the standard library's own .py files, present wherever Python is, so nothing is
downloaded. Both runs start from the same weights and see the same batches in the same
order; only the attention function differs. The script prints each run's loss curve in
brief, its mean step time, and whether the two curves agree within the noise of training
itself, measured in the same invocation: a third run (PyTorch's SDPA, the next seed) gives
the spread between two equally valid runs, and the loss's step-to-step scatter gives the
noise of a window mean.

    python examples/train_gpt.py                   # GPU: 4 layers, d_model 256, 8 heads, bf16
    python examples/train_gpt.py --device cpu --steps 20 --layers 1 --d-model 64 --context 64

On CUDA the model trains under bf16 autocast (parameters and optimizer in fp32); on the CPU in
fp32. flashattn must be importable: `pip install .`, or a CMake build through
FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python (see python/README.md).
"""
import argparse
import functools
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import flashattn

VOCAB = 256  # bytes: the corpus is (nearly all) ASCII source


def corpus_bytes(limit):
    """The standard library's top-level .py files, in name order, concatenated: up to
    `limit` bytes."""
    folder = Path(os.path.dirname(os.__file__))
    data = bytearray()
    for path in sorted(folder.glob("*.py")):
        data += path.read_bytes()
        if len(data) >= limit:
            break
    return torch.frombuffer(data[:limit], dtype=torch.uint8).long()


class Block(nn.Module):
    """Pre-norm decoder block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, d_model, heads, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.attention_norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x, attention=None):
        """x: (..., seqlen, d_model). attention(q, k, v): q, k, v (..., seqlen, heads,
        head_dim) to the attended values in q's shape; None: self.sdpa, causal over each
        sequence (examples/generate.py passes packed and KV-cache attention instead)."""
        # Views of one projection, head_dim contiguous: flashattn reads them in place and
        # autograd writes their gradients back into it.
        q, k, v = self.qkv(self.attention_norm(x)).unflatten(-1, (3, self.heads, -1)).unbind(-3)
        attended = (attention or self.causal_sdpa)(q, k, v)
        x = x + self.proj(attended.flatten(-2))
        return x + self.mlp(self.mlp_norm(x))

    def causal_sdpa(self, q, k, v):
        """self.sdpa takes (batch, heads, seqlen, head_dim): transposed views, no copies."""
        return self.sdpa(q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2),
                         is_causal=True).transpose(-3, -2)


class GPT(nn.Module):
    def __init__(self, layers, d_model, heads, context, sdpa):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.position = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, sdpa) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied input and output embeddings
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",
                                                                     "mlp.2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens, positions=None, attention=None):
        """Logits (..., vocab) of tokens (...). positions: each token's place in its sequence,
        tokens' shape; None: tokens is (batch, seqlen) and the positions 0 .. seqlen - 1.
        attention(layer, q, k, v): each block's attention (see Block.forward); None: causal
        self.sdpa."""
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for layer, block in enumerate(self.blocks):
            x = block(x, None if attention is None else functools.partial(attention, layer))
        return self.head(self.norm(x))


def batches(data, steps, batch, context, seed):
    """The (inputs, targets) start offsets of every step: fixed by the seed, so every run
    sees the same batches in the same order."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, len(data) - context - 1, (steps, batch), generator=generator)


def take(data, starts, context, device):
    rows = starts[:, None] + torch.arange(context + 1)
    chunk = data[rows].to(device, non_blocking=True)
    return chunk[:, :-1], chunk[:, 1:]


def learning_rate(step, args):
    """Linear warm-up, then cosine decay to a tenth."""
    warmup = max(1, args.steps // 10)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, args.steps - warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def train(name, sdpa, seed, train_data, val_data, args, device):
    """One run: per-step losses, per-step times (s) and the final validation loss."""
    torch.manual_seed(seed)
    model = GPT(args.layers, args.d_model, args.heads, args.context, sdpa).to(device)
    losses, times = fit(model, name, seed, train_data, args, device)
    return losses, times, evaluate(model, val_data, args, device)


def fit(model, name, seed, train_data, args, device):
    """Trains model in place for args.steps steps (args.batch sequences of args.context
    bytes, the batches fixed by seed, AdamW at args.lr): per-step losses and times (s)."""
    step_fn = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    plan = batches(train_data, args.steps, args.batch, args.context, seed)
    losses, times = [], []
    cuda = device.type == "cuda"
    events = []
    for step in range(args.steps):
        inputs, targets = take(train_data, plan[step], args.context, device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args)
        start = time.perf_counter()
        if cuda:
            events.append((torch.cuda.Event(enable_timing=True),
                           torch.cuda.Event(enable_timing=True)))
            events[-1][0].record()
        with autocast(device):
            logits = step_fn(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if cuda:
            events[-1][1].record()
        else:
            times.append(time.perf_counter() - start)
        losses.append(loss.detach())
        if args.log_every and (step + 1) % args.log_every == 0:
            print(f"  [{name}] step {step + 1:5d}  loss {loss.item():.4f}", flush=True)
    if cuda:
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in events]
    return [x.item() for x in losses], times


@torch.no_grad()
def evaluate(model, data, args, device):
    """Mean loss over fixed batches of the held-out tail of the corpus."""
    plan = batches(data, args.eval_batches, args.batch, args.context, seed=12345)
    total = 0.0
    for starts in plan:
        inputs, targets = take(data, starts, args.context, device)
        with autocast(device):
            logits = model(inputs)
        total += F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()).item()
    return total / len(plan)


def window_mean(losses, end, width):
    window = losses[max(0, end - width):end]
    return sum(window) / len(window)


def step_noise(losses, width):
    """Scatter of the loss from step to step over the last quarter: the standard deviation
    of each loss minus the mean of its `width` neighbours."""
    tail = losses[-max(len(losses) // 4, 2):]
    if len(tail) < 3:
        return 0.0
    half = max(1, width // 2)
    residuals = [x - statistics.fmean(tail[max(0, i - half):i + half + 1])
                 for i, x in enumerate(tail)]
    return statistics.pstdev(residuals)


def summarise(name, run, args):
    losses, times, val = run
    width = max(1, min(20, args.steps // 10))
    marks = sorted({max(1, round(args.steps * f)) for f in (0.25, 0.5, 0.75, 1.0)})
    curve = "  ".join(f"{m}: {window_mean(losses, m, width):.4f}" for m in marks)
    skip = min(len(times) - 1, max(1, len(times) // 10))  # warm-up steps (allocator, compile)
    ms = 1e3 * statistics.fmean(times[skip:])
    print(f"{name:<22} first {losses[0]:.4f}  window means at step {curve}  "
          f"val {val:.4f}  {ms:8.2f} ms/step")
    return {"final": window_mean(losses, args.steps, width), "val": val, "ms": ms,
            "noise": step_noise(losses, width) / math.sqrt(width)}


def compare(ours, theirs, spread, losses_ours, losses_theirs):
    """Whether flashattn's curve agrees with PyTorch's: the final window mean and the
    validation loss differ by no more than two equally valid runs do (seed spread), or
    than twice the noise of a window mean."""
    tolerance = max(spread["final"], 2 * max(ours["noise"], theirs["noise"]))
    tolerance_val = max(spread["val"], 2 * max(ours["noise"], theirs["noise"]))
    final = abs(ours["final"] - theirs["final"])
    val = abs(ours["val"] - theirs["val"])
    per_step = max(abs(a - b) for a, b in zip(losses_ours, losses_theirs))
    print(f"flashattn - PyTorch: final window mean {final:.4f} (tolerance {tolerance:.4f}), "
          f"val {val:.4f} (tolerance {tolerance_val:.4f}), largest per-step gap {per_step:.4f}")
    print(f"seed spread (PyTorch, seed and seed + 1): final window mean {spread['final']:.4f}, "
          f"val {spread['val']:.4f}; noise of a window mean {ours['noise']:.4f} (flashattn), "
          f"{theirs['noise']:.4f} (PyTorch)")
    agree = final <= tolerance and val <= tolerance_val
    print(f"loss curves agree within the noise: {'yes' if agree else 'NO'}")
    print(f"speed: flashattn {ours['ms']:.2f} ms/step, PyTorch {theirs['ms']:.2f} ms/step "
          f"({theirs['ms'] / ours['ms']:.2f}x)")
    return agree


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus-bytes", type=int, default=8 << 20,
                   help="bytes of standard-library source to read (the last tenth is held out)")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--log-every", type=int, default=0, help="print the loss every N steps")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--no-seed-run", action="store_true",
                   help="skip the third run that measures the seed-to-seed spread")
    args = p.parse_args()
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    return args


def main():
    args = parse_args()
    device = torch.device(args.device)
    data = corpus_bytes(args.corpus_bytes)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    precision = "bf16 autocast" if device.type == "cuda" else "fp32"
    print(f"corpus: {len(data) / 1e6:.2f} MB of {os.path.dirname(os.__file__)}/*.py; model: "
          f"{args.layers} layers, d_model {args.d_model}, {args.heads} heads of "
          f"{args.d_model // args.heads}, context {args.context}, batch {args.batch}, "
          f"{args.steps} steps, {precision} on {device}", flush=True)
    runs = {"flashattn.sdpa": (flashattn.sdpa, args.seed),
            "torch SDPA": (F.scaled_dot_product_attention, args.seed)}
    if not args.no_seed_run:
        runs["torch SDPA, seed + 1"] = (F.scaled_dot_product_attention, args.seed + 1)
    results, summaries = {}, {}
    for name, (sdpa, seed) in runs.items():
        results[name] = train(name, sdpa, seed, train_data, val_data, args, device)
    for name, run in results.items():
        summaries[name] = summarise(name, run, args)
    ours, theirs = summaries["flashattn.sdpa"], summaries["torch SDPA"]
    other = summaries.get("torch SDPA, seed + 1", theirs)
    spread = {k: abs(theirs[k] - other[k]) for k in ("final", "val")}
    compare(ours, theirs, spread, results["flashattn.sdpa"][0], results["torch SDPA"][0])


if __name__ == "__main__":
    main()
