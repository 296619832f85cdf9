"""A transformer block whose attention is flashattn.sdpa, checked against PyTorch's SDPA.

A pre-norm decoder block (causal self-attention, then an MLP) is run twice with the same
weights and input: once with torch.nn.functional.scaled_dot_product_attention, once with
flashattn.sdpa in its place. The script checks that both give the same output (within the
dtype's rounding) and prints the time of the attention alone and of the whole block: the
median over rounds in which the two implementations take turns.

    python examples/transformer_block.py                 # GPU: d_model 1024, 16 heads, seqlen 4096, bf16
    python examples/transformer_block.py --device cpu    # small sizes, float32

flashattn must be importable: `pip install .`, or a CMake build through
FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python (see python/README.md).
"""
import argparse
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
        # contiguous, so flashattn reads q, k and v in place.
        q, k, v = self.qkv(x).view(batch, seqlen, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = self.sdpa(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(batch, seqlen, d_model))

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def seconds_per_call(fn, device, iters):
    """Wall time of fn() per call over iters back-to-back calls (GPU time on CUDA)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def using(block, sdpa, fn):
    """fn, run with `sdpa` as the block's attention: timed functions of both implementations
    can then take turns."""
    def run():
        block.sdpa = sdpa
        return fn()
    return run


def median_times(fns, device, iters, rounds):
    """Median over rounds of each fn's seconds_per_call, the fns taking turns within a round
    so that clock and temperature drift reach them alike; two warm-up calls each first."""
    for fn in fns.values():
        fn()
        fn()
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(seconds_per_call(fn, device, iters))
    return {name: statistics.median(times) for name, times in samples.items()}


def relative_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# Unset options take these, by device: the GPU sizes of a real model, small ones on the CPU.
DEFAULTS = {
    "cuda": dict(dtype="bfloat16", seqlen=4096, d_model=1024, heads=16, iters=20),
    "cpu": dict(dtype="float32", seqlen=256, d_model=256, heads=4, iters=3),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seqlen", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--iters", type=int)
    parser.add_argument("--rounds", type=int, default=7,
                        help="timed rounds per implementation; the median is printed")
    args = parser.parse_args()
    device = torch.device(args.device)
    for name, value in DEFAULTS[device.type].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(0)
    block = Block(args.d_model, args.heads, F.scaled_dot_product_attention)
    block = block.to(device=device, dtype=dtype).eval()
    x = torch.randn(args.batch, args.seqlen, args.d_model, device=device, dtype=dtype)
    print(f"block: batch {args.batch}, seqlen {args.seqlen}, d_model {args.d_model}, "
          f"{args.heads} heads (head_dim {args.d_model // args.heads}), {args.dtype} on {device}")

    implementations = {"torch sdpa": F.scaled_dot_product_attention,
                       "flashattn.sdpa": flashattn.sdpa}
    results = {name: {} for name in implementations}
    with torch.inference_mode():
        normed = block.attention_norm(x)
        timed = {}
        for name, sdpa in implementations.items():
            block.sdpa = sdpa
            results[name]["out"] = block(x)
            results[name]["attention"] = block.attention(normed)
            timed[(name, "attention_s")] = using(block, sdpa, lambda: block.attention(normed))
            timed[(name, "block_s")] = using(block, sdpa, lambda: block(x))
        for (name, what), seconds in median_times(timed, device, args.iters,
                                                  args.rounds).items():
            results[name][what] = seconds

    ours, theirs = results["flashattn.sdpa"], results["torch sdpa"]
    attention_error = relative_l2(ours["attention"], theirs["attention"])
    block_error = relative_l2(ours["out"], theirs["out"])
    print(f"{'':16}{'attention layer':>18}{'block':>14}")
    for name, r in results.items():
        print(f"{name:16}{r['attention_s'] * 1e3:>15.3f} ms{r['block_s'] * 1e3:>11.3f} ms")
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
