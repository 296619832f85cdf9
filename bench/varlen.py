"""Variable-length prefill: batches of causal sequences of a realistic spread of lengths,
packed (flashattn.varlen_attention), against flashattn's dense kernels at the batch's mean
length (the same tokens as equal sequences: what packing should cost nothing against) and
PyTorch's fastest way to run the same batch (a padded batch on each SDPA backend, the
sequences one by one, and nested jagged tensors), timed in one process on one GPU.

TFLOP/s count each sequence's own work, 4·H·n²·d/2 (causal), 2.5× that for a backward.
Lengths are log-normal around `--mean` (clipped to [16, 8·mean]) until the total reaches
`--tokens`. Usage: python3 bench/varlen.py [--tokens 16384 32768 65536] [--out results.md]
bench/run --grids varlen times the same calls at each total (varlen_grid.py), forward and
forward + backward, into the suite's results.
"""
import argparse
import math
import statistics

import torch
import torch.nn.functional as F

import flashattn
import varlen_grid
from varlen_grid import HEAD_DIM, HEADS, KV_HEADS

DTYPE = {"bf16": torch.bfloat16}[varlen_grid.DTYPE]


def lengths_for(tokens, mean, gen):
    """varlen_grid's spread, drawn from torch's generator `gen`."""
    return varlen_grid.spread(tokens, mean, lambda: torch.randn((), generator=gen).item())


def timed(fn, repeats=20):
    """Median milliseconds of fn() over `repeats` calls after warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def with_backward(forward, tensors):
    """forward() and the backward of its output's sum-of-products with a fixed dout."""
    def step():
        out = forward()
        torch.autograd.grad(out, tensors, grad_outputs=torch.ones_like(out))
    return step


def sdpa_padded(q, k, v, lengths, backend):
    """The batch padded to its longest sequence, (B, H, N, d), causal; padding rows are
    computed and discarded (SDPA takes no lengths). Returns the call and its padded inputs,
    leaves of their own that require grad where q, k, v do: the padding is done once here,
    so neither the forward nor the backward times it."""
    batch, longest = len(lengths), max(lengths)
    def pad(x, heads):
        out = x.new_zeros(batch, longest, heads, HEAD_DIM)
        at = 0
        for b, n in enumerate(lengths):
            out[b, :n] = x.detach()[at:at + n]
            at += n
        return out.transpose(1, 2).requires_grad_(x.requires_grad)
    qp, kp, vp = pad(q, HEADS), pad(k, KV_HEADS), pad(v, KV_HEADS)
    def run():
        with torch.nn.attention.sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True)
    return run, (qp, kp, vp)


def sdpa_each(q, k, v, lengths):
    """The sequences one at a time, each on SDPA's own choice of backend."""
    def run():
        at, outs = 0, []
        for n in lengths:
            s = slice(at, at + n)
            outs.append(F.scaled_dot_product_attention(
                q[s].transpose(0, 1)[None], k[s].transpose(0, 1)[None], v[s].transpose(0, 1)[None],
                is_causal=True, enable_gqa=True))
            at += n
        return outs
    return run


def point(tokens, mean, gen, backward):
    lengths = lengths_for(tokens, mean, gen)
    return lengths, measure(lengths, backward)


def measure(lengths, backward):
    """Every call on one packed batch of `lengths`: [(name, ms, TFLOP/s, error)], NaN and
    the error's first line where a call cannot run (printed as it happens)."""
    total = sum(lengths)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(total, HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, requires_grad=backward)
    k = torch.randn(total, KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, requires_grad=backward)
    v = torch.randn(total, KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, requires_grad=backward)
    work = varlen_grid.causal_flops(lengths, "fwd+bwd" if backward else "fwd")
    mean_n = round(total / len(lengths))
    dense_b = max(1, round(total / mean_n))
    dq = torch.randn(dense_b, mean_n, HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, requires_grad=backward)
    dk = torch.randn(dense_b, mean_n, KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE, requires_grad=backward)
    dv = torch.randn_like(dk, requires_grad=backward)
    dense_work = dense_b * 4 * HEADS * mean_n * mean_n * HEAD_DIM / 2 * (3.5 if backward else 1.0)

    longest = max(lengths)

    def ours(checked, backend=None):  # called as FlashAttention's is, max_seqlen given
        return lambda: flashattn.varlen_attention(q, k, v, cu, cu, longest, longest, causal=True,
                                                  checked=checked, backend=backend)
    def dense(backend):
        return lambda: flashattn.attention(dq, dk, dv, causal=True, backend=backend)
    # The first packed call is the one the ratios take: unchecked, as FlashAttention's (no
    # host wait); the checked one beside it shows what the host's check costs.
    # cuda_mma's packed call beside it: the mma.sync kernels, forward and backward, in the
    # same run.
    calls = {"flashattn varlen unchecked (auto)": (ours(False), work, (q, k, v)),
             "flashattn varlen checked (auto)": (ours(True), work, (q, k, v)),
             "flashattn varlen unchecked (cuda_mma)": (ours(False, "cuda_mma"), work, (q, k, v))}
    for backend in ("cuda_mma", "cuda_wgmma"):
        calls[f"flashattn dense {backend} at mean length"] = (dense(backend), dense_work, (dq, dk, dv))
    sdpa = torch.nn.attention.SDPBackend
    for name, backend in (("flash", sdpa.FLASH_ATTENTION), ("efficient", sdpa.EFFICIENT_ATTENTION),
                          ("cudnn", sdpa.CUDNN_ATTENTION)):
        run, padded = sdpa_padded(q, k, v, lengths, backend)
        calls[f"torch sdpa padded ({name})"] = (run, work, padded)
    calls["torch sdpa per sequence"] = (sdpa_each(q, k, v, lengths), work, None)
    rows = []
    for name, (fn, flops, tensors) in calls.items():
        try:
            if backward:
                if tensors is None:  # the per-sequence inputs are views of q, k, v
                    base = fn
                    def fn(base=base):
                        outs = base()
                        torch.autograd.grad(outs, (q, k, v), [torch.ones_like(o) for o in outs])
                else:
                    fn = with_backward(fn, tensors)
            ms = timed(fn)
            rows.append((name, ms, flops / ms / 1e9, None))
        except Exception as error:  # a backend that cannot run the shape
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            rows.append((name, math.nan, math.nan, why))
            print(f"  {name}: {why}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=list(varlen_grid.TOKENS))
    parser.add_argument("--mean", type=int, default=varlen_grid.MEAN)
    parser.add_argument("--out")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    lines = [f"# Variable-length prefill, {torch.cuda.get_device_name()}, bf16, H {HEADS}/{KV_HEADS}, "
             f"d {HEAD_DIM}, causal\n"]
    for backward in (False, True):
        for tokens in args.tokens:
            lengths, rows = point(tokens, args.mean, gen, backward)
            ours = rows[0][1]
            torch_best = min((r[1] for r in rows
                              if varlen_grid.kind_of(r[0]) == "torch" and not math.isnan(r[1])),
                             default=math.nan)
            lines.append(f"\n## {'fwd+bwd' if backward else 'fwd'}, {len(lengths)} sequences, "
                         f"{sum(lengths)} tokens (mean {sum(lengths) // len(lengths)}, "
                         f"max {max(lengths)}); ours over PyTorch's fastest: {torch_best / ours:.2f}×\n")
            lines.append("| call | ms | TFLOP/s |\n|---|---|---|")
            lines += [f"| {name} | {ms:.3f} | {tflops:.0f} |" for name, ms, tflops, _ in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
