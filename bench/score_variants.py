"""The attention variants of a benchmark point (the variants grid: sliding window, softcap,
ALiBi, a mask tensor) as the timed calls and the float64 reference take them, written from
flashattn's public rule. The grid's problems are square, so the alignment offset is 0 under
either causal alignment and without one: query i sees key j iff i - left <= j <= i + right
(a side -1 is open; causal caps the right side at 0); a softcap c turns each scaled score s
into c·tanh(s/c); ALiBi then subtracts slope_h·|i - j|, slope_h = 2^(-8(h+1)/H) for H query
heads (the ALiBi paper's, as flashattn's harness draws them); then attn_mask (PyTorch SDPA's)
adds its float bias b[b, h, i, j], or hides the scores where its boolean mask is False. A
row whose every score is hidden gets output 0 and no gradient (accuracy.probabilities).
"""
import math
import random
from dataclasses import dataclass, field

import torch

import grid

# The project's dtype names (grid.ITEM_BYTES) as torch's.
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# Dense masks for PyTorch's SDPA are made only up to this size: above it (ALiBi's per-head
# bias at 16k tokens is 8 GiB in bf16) PyTorch has no practical form of the problem.
MASK_LIMIT_BYTES = 1 << 30

# The mask tensors (grid.ATTN_MASKS) are drawn from this seed, so every run times the same.
MASK_SEED = 0
# flashattn's dropout seed at the dropout points (PyTorch draws its own per call).
DROPOUT_SEED = 1
# A key-padding mask keeps a prefix of each sequence's keys, this fraction of them at least.
MIN_KEPT_KEYS = 0.6
# Packed documents' lengths, drawn uniformly from this range (the last cut to fit).
DOCUMENT_LENGTHS = (256, 2048)


@dataclass
class Variants:
    """One point's variants; the default is plain attention."""

    window: tuple = (-1, -1)
    softcap: float = 0.0
    alibi_slopes: torch.Tensor = None  # float32 (heads_q,) on the inputs' device
    # A bias or bool mask broadcastable to (batch, heads_q, seqlen, seqlen), on the inputs'
    # device: flashattn's and SDPA's attn_mask.
    attn_mask: torch.Tensor = field(default=None, repr=False)
    # SDPA's attn_mask for them by (seqlen, causal, dtype): made by its first call, kept for
    # the point's other calls (implementations.sdpa_mask).
    sdpa_masks: dict = field(default_factory=dict, repr=False, compare=False)
    dropout: float = 0.0  # dropout's rate (SDPA's dropout_p); 0: none

    def any(self):
        return self.scores_vary() or self.dropout > 0

    def scores_vary(self):
        """Whether a variant changes the scores or the mask (SDPA then needs an attn_mask)."""
        return (self.window != (-1, -1) or self.softcap > 0 or self.alibi_slopes is not None
                or self.attn_mask is not None)

    def keywords(self):
        """flashattn.attention's (and attention_backward's) keywords; dropout with a fixed
        seed, the forward's for the backward."""
        return dict(window_size=self.window, softcap=self.softcap,
                    alibi_slopes=self.alibi_slopes, attn_mask=self.attn_mask,
                    dropout_p=self.dropout, dropout_seed=DROPOUT_SEED)


NONE = Variants()  # its sdpa_masks stays empty: plain attention needs no mask


def alibi_slopes(heads, device):
    exponents = torch.arange(1, heads + 1, dtype=torch.float32, device=device)
    return torch.exp2(-8.0 * exponents / heads)


def of_point(point, device="cuda"):
    """The Variants of a grid.Point, ALiBi's slopes and the mask tensor on `device`."""
    return Variants(point.window or (-1, -1), point.softcap,
                    alibi_slopes(point.heads, device) if point.alibi else None,
                    attn_mask(point, device) if point.attn_mask else None,
                    dropout=point.dropout)


def attn_mask(point, device):
    """The point's mask tensor (grid.ATTN_MASKS: its shape; bool, or a bias in q's dtype),
    drawn from MASK_SEED: a bias of standard-normal values; a key-padding mask, True on a
    prefix of each sequence's keys of MIN_KEPT_KEYS to all of them, given as a (batch, 1,
    seqlen, seqlen) view whose rows are one stored row (stride 0, no copy); packed
    documents, True where query and key lie in the same document."""
    spec = grid.ATTN_MASKS[point.attn_mask]
    sizes = spec.sizes(point.batch, point.heads, point.seqlen)
    if spec.holds == "bias":
        generator = torch.Generator(device=device).manual_seed(MASK_SEED)
        return torch.randn(sizes, generator=generator, dtype=TORCH_DTYPES[point.dtype],
                           device=device)
    rng = random.Random(MASK_SEED)
    keys = torch.arange(point.seqlen, device=device)
    if spec.holds == "key padding":
        kept = [rng.randint(math.ceil(MIN_KEPT_KEYS * point.seqlen), point.seqlen)
                for _ in range(point.batch)]
        prefix = keys < torch.tensor(kept, device=device)[:, None]
        return prefix.view(sizes).expand(point.batch, 1, point.seqlen, point.seqlen)
    lengths = []
    while sum(lengths) < point.seqlen:
        lengths.append(rng.randint(*DOCUMENT_LENGTHS))
    document = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                       torch.tensor(lengths, device=device))[:point.seqlen]
    return (document[:, None] == document[None, :]).view(sizes)


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
    """Scaled scores s (heads, len(rows), len(keys)) of batch element 0 through the variants,
    the hidden ones -inf; and the softcap's derivative ∂(softcapped)/∂s (1 without one),
    which a backward multiplies into dS."""
    capped = 1.0
    if variants.softcap > 0:
        t = torch.tanh(s / variants.softcap)
        s, capped = variants.softcap * t, 1 - t * t
    if variants.alibi_slopes is not None:
        distance = (rows[:, None] - keys[None, :]).abs().to(s.dtype)
        s = s - variants.alibi_slopes.to(s.dtype)[:, None, None] * distance
    if variants.attn_mask is not None:
        mask = variants.attn_mask[0][:, rows][:, :, keys]  # (heads or 1, rows, keys)
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return s.masked_fill(~visible(rows, keys, causal, variants.window), float("-inf")), capped


def hides_keys(causal, window):
    """Whether the causal mask or the window hides any score of a square problem."""
    return causal or window != (-1, -1)


def sdpa_mask_bytes(seqlen, causal, heads, dtype, variants):
    """Bytes of the mask sdpa_mask makes: one (seqlen, seqlen) plane, one per head with
    ALiBi; with attn_mask, its broadcast with a (seqlen, seqlen) plane, and none where
    attn_mask itself is SDPA's."""
    if variants.attn_mask is not None:
        mask = variants.attn_mask
        if not hides_keys(causal, variants.window):
            return 0
        return (math.prod(torch.broadcast_shapes(mask.shape, (seqlen, seqlen))) *
                mask.element_size())
    planes = heads if variants.alibi_slopes is not None else 1
    return planes * seqlen * seqlen * torch.finfo(dtype).bits // 8


def sdpa_mask(seqlen, causal, variants, dtype, device):
    """The attn_mask for torch's SDPA that expresses the window (and the causal mask, which
    SDPA does not take beside an explicit one) and ALiBi: additive, (1, heads or 1, seqlen,
    seqlen) in `dtype` (4-d: cuDNN's backend takes no 3-d mask), 0 or -slope_h·|i - j| where
    visible, -inf elsewhere. The bias is computed in float32 one head at a time and rounded
    to the dtype, as a model caches it. With the variants' attn_mask (and no ALiBi), that
    tensor with the causal mask and window folded in (sdpa_attn_mask)."""
    if variants.attn_mask is not None:
        return sdpa_attn_mask(seqlen, causal, variants)
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


def sdpa_attn_mask(seqlen, causal, variants):
    """The variants' attn_mask with the keys the causal mask and the window hide hidden too:
    a bool mask ANDed with the visible keys, a float bias -inf at the hidden ones (their
    broadcast with a (seqlen, seqlen) plane); the tensor itself, not a copy, where they hide
    none."""
    mask = variants.attn_mask
    if not hides_keys(causal, variants.window):
        return mask
    positions = torch.arange(seqlen, device=mask.device)
    seen = visible(positions, positions, causal, variants.window)
    return mask & seen if mask.dtype == torch.bool else mask.masked_fill(~seen, float("-inf"))
