"""The attention variants of a benchmark point (the variants grid: sliding window, softcap,
ALiBi) as the timed calls and the float64 reference take them, written from flashattn's
public rule. The grid's problems are square, so the alignment offset is 0 under either
causal alignment and without one: query i sees key j iff i - left <= j <= i + right (a side
-1 is open; causal caps the right side at 0); a softcap c turns each scaled score s into
c·tanh(s/c); ALiBi then subtracts slope_h·|i - j|, slope_h = 2^(-8(h+1)/H) for H query heads
(the ALiBi paper's, as flashattn's harness draws them).
"""
from dataclasses import dataclass, field

import torch

# Dense masks for PyTorch's SDPA are made only up to this size: above it (ALiBi's per-head
# bias at 16k tokens is 8 GiB in bf16) PyTorch has no practical form of the problem.
MASK_LIMIT_BYTES = 1 << 30


@dataclass
class Variants:
    """One point's variants; the default is plain attention."""

    window: tuple = (-1, -1)
    softcap: float = 0.0
    alibi_slopes: torch.Tensor = None  # float32 (heads_q,) on the inputs' device
    # SDPA's attn_mask for them by (seqlen, causal, dtype): made by its first call, kept for
    # the point's other calls (implementations.sdpa_mask).
    sdpa_masks: dict = field(default_factory=dict, repr=False, compare=False)

    def any(self):
        return self.window != (-1, -1) or self.softcap > 0 or self.alibi_slopes is not None

    def keywords(self):
        """flashattn.attention's (and attention_backward's) keywords."""
        return dict(window_size=self.window, softcap=self.softcap,
                    alibi_slopes=self.alibi_slopes)


NONE = Variants()  # its sdpa_masks stays empty: plain attention needs no mask


def alibi_slopes(heads, device):
    exponents = torch.arange(1, heads + 1, dtype=torch.float32, device=device)
    return torch.exp2(-8.0 * exponents / heads)


def of_point(point, device="cuda"):
    """The Variants of a grid.Point, ALiBi's slopes on `device`."""
    return Variants(point.window or (-1, -1), point.softcap,
                    alibi_slopes(point.heads, device) if point.alibi else None)


def visible(rows, keys, causal, window):
    """bool (len(rows), len(keys)): which keys each of the query `rows` sees."""
    i, j = rows[:, None], keys[None, :]
    seen = torch.ones(len(rows), len(keys), dtype=torch.bool, device=rows.device)
    left, right = window
    if causal:
        seen &= j <= i
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


def scores(s, rows, keys, causal, variants):
    """Scaled scores s (..., heads, len(rows), len(keys)) through the variants, the hidden
    ones -inf; and the softcap's derivative ∂(softcapped)/∂s (1 without one), which a
    backward multiplies into dS."""
    capped = 1.0
    if variants.softcap > 0:
        t = torch.tanh(s / variants.softcap)
        s, capped = variants.softcap * t, 1 - t * t
    if variants.alibi_slopes is not None:
        distance = (rows[:, None] - keys[None, :]).abs().to(s.dtype)
        s = s - variants.alibi_slopes.to(s.dtype)[:, None, None] * distance
    return s.masked_fill(~visible(rows, keys, causal, variants.window), float("-inf")), capped


def sdpa_mask_bytes(seqlen, heads, dtype, variants):
    """Bytes of the additive mask sdpa_mask makes: one (seqlen, seqlen) plane, one per head
    with ALiBi."""
    planes = heads if variants.alibi_slopes is not None else 1
    return planes * seqlen * seqlen * torch.finfo(dtype).bits // 8


def sdpa_mask(seqlen, causal, variants, dtype, device):
    """The additive attn_mask for torch's SDPA that expresses the window (and the causal
    mask, which SDPA does not take beside an explicit one) and ALiBi: (1, heads or 1, seqlen,
    seqlen) in `dtype` (4-d: cuDNN's backend takes no 3-d mask), 0 or -slope_h·|i - j| where
    visible, -inf elsewhere. The bias is computed in float32 one head at a time and rounded
    to the dtype, as a model caches it."""
    positions = torch.arange(seqlen, device=device)
    hidden = ~visible(positions, positions, causal, variants.window)
    if variants.alibi_slopes is None:
        return torch.zeros(1, 1, seqlen, seqlen, dtype=dtype, device=device).masked_fill_(
            hidden, float("-inf"))
    distance = (positions[:, None] - positions[None, :]).abs().float()
    mask = torch.empty(1, len(variants.alibi_slopes), seqlen, seqlen, dtype=dtype,
                       device=device)
    for h, slope in enumerate(variants.alibi_slopes):
        mask[0, h] = (-slope * distance).masked_fill_(hidden, float("-inf"))
    return mask
