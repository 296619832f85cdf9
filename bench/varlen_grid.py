"""Variable-length prefill problems: a batch of causal sequences whose lengths follow a
realistic spread, packed without padding. bench/varlen.py times them; bench/run's "varlen"
grid is totals of 16k, 32k and 64k tokens, forward and forward + backward, each point one
fixed draw of lengths, and varlen.py's calls at each.

Pure Python (no torch), so the grids can be listed and tested anywhere.
"""
import math
import random
from dataclasses import dataclass

HEADS, KV_HEADS, HEAD_DIM, DTYPE = 32, 8, 128, "bf16"
TOKENS = (16384, 32768, 65536)
MEAN = 1024
# The spread: log-normal with this sigma, scaled by 0.73 (about e^(-sigma²/2), so that the
# mean before clipping is near `mean`), clipped to [MIN_LENGTH, MAX_OVER_MEAN · mean].
SIGMA = 0.8
SCALE = 0.73
MIN_LENGTH = 16
MAX_OVER_MEAN = 8
# FLOPs of forward + backward over the forward's (grid.PASS_FLOPS).
PASS_FLOPS = {"fwd": 1.0, "fwd+bwd": 3.5}
# What each of varlen.py's calls is, by how its name starts: ours packed, ours dense at the
# mean length (the same tokens as equal sequences), or a PyTorch way to run the batch.
KINDS = (("flashattn varlen", "packed"), ("flashattn dense", "dense"), ("torch", "torch"))


def spread(tokens, mean, normal):
    """Sequence lengths until they total `tokens` (the last one cut to fit, but at least
    MIN_LENGTH), each drawn from the spread; normal() gives a standard normal draw."""
    out = []
    while sum(out) < tokens:
        n = int(math.exp(normal() * SIGMA) * mean * SCALE)
        out.append(max(MIN_LENGTH, min(MAX_OVER_MEAN * mean, n, tokens - sum(out))))
    return out


def causal_flops(lengths, pass_="fwd"):
    """Each sequence's own causal work, 4·H·n²·d/2, times the pass's factor."""
    return sum(4 * HEADS * n * n * HEAD_DIM / 2 for n in lengths) * PASS_FLOPS[pass_]


def kind_of(call):
    return next(kind for start, kind in KINDS if call.startswith(start))


@dataclass(frozen=True)
class VarlenPoint:
    """One packed batch of `tokens` tokens and one pass, as a point of bench/run."""

    tokens: int
    pass_: str = "fwd"
    mean: int = MEAN
    grid: str = "varlen"
    timed: bool = True

    def lengths(self):
        """The batch's lengths: one fixed draw per total (seeded by it), the same for both
        passes and in every process."""
        draws = random.Random(self.tokens)
        return spread(self.tokens, self.mean, lambda: draws.gauss(0.0, 1.0))

    def label(self):
        """"16384 tokens, 17 sequences (mean 963, max 4097) H32/8 d128 bf16 causal", with
        " fwd+bwd" for that pass."""
        lengths = self.lengths()
        step = "" if self.pass_ == "fwd" else f" {self.pass_}"
        return (f"{self.tokens} tokens, {len(lengths)} sequences (mean "
                f"{sum(lengths) // len(lengths)}, max {max(lengths)}) H{HEADS}/{KV_HEADS} "
                f"d{HEAD_DIM} {DTYPE} causal{step}")

    def flops(self):
        return causal_flops(self.lengths(), self.pass_)

    def row(self, calls):
        """The point's row of bench/run's results from varlen.measure's calls [(name, ms,
        TFLOP/s, error)], NaN where a call did not run: every call, and the ratios the
        report gives: ours over PyTorch's fastest way (time) and over the faster dense kernel
        at the mean length (TFLOP/s: the dense batch does a different amount of work)."""
        lengths = self.lengths()
        entries = [{"call": name, "kind": kind_of(name),
                    "ms": None if math.isnan(ms) else ms,
                    "tflops": None if math.isnan(tflops) else tflops, "note": error}
                   for name, ms, tflops, error in calls]
        ours = next(e for e in entries if e["kind"] == "packed")
        torch_best = min((e for e in entries if e["kind"] == "torch" and e["ms"] is not None),
                         key=lambda e: e["ms"], default=None)
        dense_best = max((e for e in entries if e["kind"] == "dense" and e["ms"] is not None),
                         key=lambda e: e["tflops"], default=None)
        row = {"grid": self.grid, "point": self.label(), "pass": self.pass_,
               "tokens": self.tokens, "mean": self.mean, "sequences": len(lengths),
               "max_length": max(lengths), "lengths": lengths, "heads_q": HEADS,
               "heads_kv": KV_HEADS, "head_dim": HEAD_DIM, "dtype": DTYPE, "calls": entries,
               "ms": ours["ms"], "tflops": ours["tflops"]}
        if ours["ms"] is not None and torch_best:
            row.update(torch_best=torch_best["call"], torch_best_ms=torch_best["ms"],
                       speedup=torch_best["ms"] / ours["ms"])
        if ours["ms"] is not None and dense_best:
            row.update(dense_best=dense_best["call"], dense_tflops=dense_best["tflops"],
                       of_dense=ours["tflops"] / dense_best["tflops"])
        return row


PASSES = ("fwd", "fwd+bwd")


def suite_points(tokens=TOKENS, passes=PASSES):
    return [VarlenPoint(n, pass_) for pass_ in passes for n in tokens]


def quick_points():
    return suite_points(tokens=TOKENS[:1])
