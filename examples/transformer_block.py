"""A transformer block whose attention is flashattn.sdpa, checked against PyTorch's SDPA.

A pre-norm decoder block (causal self-attention, then an MLP) is run twice with the same
weights and input: once with torch.nn.functional.scaled_dot_product_attention, once with
flashattn.sdpa in its place. The script checks that both give the same output (within the
dtype's rounding) and times the attention layer alone and the whole block: rounds in which
the two implementations take turns in a fresh random order, each round timing --iters
back-to-back calls. It prints each time as the median and the range (min-max) over the
rounds, the speed-up (torch's time over flashattn's, taken within each round) likewise, and
on CUDA the host time of one call issued without waiting for the GPU: a block whose host time
reaches its GPU time is bound by the host, not by its kernels.

    python examples/transformer_block.py                 # GPU: d_model 1024, 16 heads, seqlen 4096, bf16
    python examples/transformer_block.py --timer wall    # GPU: wall time instead of CUDA events
    python examples/transformer_block.py --device cpu    # small sizes, float32

flashattn must be importable: `pip install .`, or a CMake build through
FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python (see python/README.md).
"""
import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import flashattn


class Block(nn.Module):
    """x + attention(norm(x)), then + mlp(norm(x)). `sdpa` is the attention function."""

    def __init__(self, d_model, heads, sdpa):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.attention_norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def attention(self, x):
        batch, seqlen, d_model = x.shape
        # (3, batch, heads, seqlen, head_dim) views of one projection: head_dim stays
        # contiguous, so flashattn reads q, k and v in place, without a copy.
        q, k, v = self.qkv(x).view(batch, seqlen, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = self.sdpa(q, k, v, is_causal=True)
        # flashattn.sdpa's out is a view of (batch, seqlen, heads, head_dim) memory, so this
        # transpose and reshape are views too: proj reads the attention's output as written.
        return self.proj(out.transpose(1, 2).reshape(batch, seqlen, d_model))

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def event_seconds(fn, iters):
    """GPU time per call of iters back-to-back calls, between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def wall_seconds(fn, device, iters):
    """Wall time per call of iters back-to-back calls, from an idle device to the last
    call's completion."""
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize()
    return (time.perf_counter() - start) / iters


def host_seconds(fn, iters):
    """Host time per call of iters calls issued without waiting for the GPU (which then
    runs behind); waits for it afterwards, outside the time."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    seconds = (time.perf_counter() - start) / iters
    torch.cuda.synchronize()
    return seconds


def timed_rounds(fns, measure, rounds, seed=0):
    """Each fn's measure(fn) in every round, the fns in a fresh random order each round (so
    that none always runs right after the same other: the GPU's clock follows its recent
    power draw); two warm-up calls each first. {name: [seconds per round]}."""
    for fn in fns.values():
        fn()
        fn()
    order, samples = list(fns), {name: [] for name in fns}
    shuffle = random.Random(seed).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            samples[name].append(measure(fns[name]))
    return samples


def spread(values, digits=3, unit=""):
    """'median (min-max)' of values."""
    return (f"{statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def relative_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# Unset options take these, by device: the GPU sizes of a real model, small ones on the CPU.
DEFAULTS = {
    "cuda": dict(dtype="bfloat16", seqlen=4096, d_model=1024, heads=16, iters=50),
    "cpu": dict(dtype="float32", seqlen=256, d_model=256, heads=4, iters=3),
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seqlen", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--iters", type=int, help="back-to-back calls timed per round")
    parser.add_argument("--rounds", type=int, default=7,
                        help="timed rounds per implementation; median and range are printed")
    parser.add_argument("--timer", choices=["events", "wall"],
                        help="CUDA events (GPU time, the default on CUDA) or wall time "
                             "(perf_counter to the last call's completion; the CPU's only "
                             "timer)")
    args = parser.parse_args()
    device = torch.device(args.device)
    for name, value in DEFAULTS[device.type].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.timer is None:
        args.timer = "events" if device.type == "cuda" else "wall"
    if args.timer == "events" and device.type != "cuda":
        parser.error("--timer events needs a CUDA device")
    if args.iters < 1 or args.rounds < 1:
        parser.error("--iters and --rounds must be at least 1")
    return args, device


def using(block, sdpa, fn):
    """fn, run with `sdpa` as the block's attention: timed functions of both implementations
    can then take turns."""
    def run():
        block.sdpa = sdpa
        return fn()
    return run


# A block is called host-bound where issuing it takes this share of its time per call or more.
HOST_BOUND = 0.9


def print_times(samples, hosts, args):
    """Each implementation's ms per call of the attention layer and the block (median and
    range over the rounds), the speed-up within each round, and, where measured, the host
    ms per call of sdpa alone and of the block."""
    names = ("torch sdpa", "flashattn.sdpa")
    parts = ("attention", "block")
    timer = "CUDA events" if args.timer == "events" else "wall time"
    print(f"ms per call, median (min-max) over {args.rounds} rounds of {args.iters} calls, "
          f"{timer}")
    print(f"{'':16}{'attention layer':>22}{'block':>24}")
    for name in names:
        ms = [[s * 1e3 for s in samples[name, part]] for part in parts]
        print(f"{name:16}{spread(ms[0]):>22}{spread(ms[1]):>24}")
    speedups = [[t / f for t, f in zip(samples[names[0], part], samples[names[1], part])]
                for part in parts]
    print(f"{'speed-up':16}{spread(speedups[0], 2, 'x'):>22}{spread(speedups[1], 2, 'x'):>24}"
          f"  torch's time / flashattn's, per round")
    if hosts:
        print(f"{'host ms to issue one call (no GPU wait), median':50}{'sdpa':>8}{'block':>8}")
        for name in names:
            sdpa, block = (statistics.median(hosts[name, part]) for part in ("sdpa", "block"))
            # Issuing a block that takes about as long as running it leaves the GPU waiting.
            bound = block >= HOST_BOUND * statistics.median(samples[name, "block"])
            print(f"{name:50}{sdpa * 1e3:>8.3f}{block * 1e3:>8.3f}"
                  f"{'  block host-bound' if bound else ''}")


def calling(sdpa, q, k, v):
    """sdpa on q, k, v (causal) as a function of no arguments."""
    return lambda: sdpa(q, k, v, is_causal=True)


def main():
    args, device = parse_args()
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(0)
    block = Block(args.d_model, args.heads, F.scaled_dot_product_attention)
    block = block.to(device=device, dtype=dtype).eval()
    x = torch.randn(args.batch, args.seqlen, args.d_model, device=device, dtype=dtype)
    print(f"block: batch {args.batch}, seqlen {args.seqlen}, d_model {args.d_model}, "
          f"{args.heads} heads (head_dim {args.d_model // args.heads}), {args.dtype} on {device}")

    implementations = {"torch sdpa": F.scaled_dot_product_attention,
                       "flashattn.sdpa": flashattn.sdpa}
    outputs = {}
    with torch.inference_mode():
        normed = block.attention_norm(x)
        q, k, v = block.qkv(normed).view(args.batch, args.seqlen, 3, args.heads,
                                         -1).permute(2, 0, 3, 1, 4)
        timed, issued = {}, {}
        for name, sdpa in implementations.items():
            block.sdpa = sdpa
            outputs[name] = block(x), block.attention(normed)
            timed[name, "attention"] = using(block, sdpa, lambda: block.attention(normed))
            timed[name, "block"] = using(block, sdpa, lambda: block(x))
            issued[name, "sdpa"] = calling(sdpa, q, k, v)
            issued[name, "block"] = timed[name, "block"]
        measure = ((lambda fn: event_seconds(fn, args.iters)) if args.timer == "events" else
                   (lambda fn: wall_seconds(fn, device, args.iters)))
        samples = timed_rounds(timed, measure, args.rounds)
        # On the CPU the host does the work itself: its time is the wall time above.
        hosts = (timed_rounds(issued, lambda fn: host_seconds(fn, args.iters), args.rounds)
                 if device.type == "cuda" else None)
    print_times(samples, hosts, args)

    (ours, ours_attention), (theirs, theirs_attention) = (outputs["flashattn.sdpa"],
                                                          outputs["torch sdpa"])
    attention_error = relative_l2(ours_attention, theirs_attention)
    block_error = relative_l2(ours, theirs)
    print(f"relative L2 difference, flashattn vs torch: attention {attention_error:.2e}, "
          f"block {block_error:.2e}")
    # Both round to the same dtype; a few units of its epsilon is rounding, more is a bug.
    tolerance = 1e-5 if dtype == torch.float32 else 4 * torch.finfo(dtype).eps
    if attention_error > tolerance:
        raise SystemExit(f"FAIL: attention outputs differ by {attention_error:.2e} "
                         f"(tolerance {tolerance:.1e})")
    print("OK: same output as torch's SDPA")


if __name__ == "__main__":
    main()
