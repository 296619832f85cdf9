"""The benchmark's points: which shapes, dtypes and masks each part of the suite runs.

Twelve grids:
- "paper": the FlashAttention papers' forward grid: batch × seqlen = 16384 tokens and
  heads × head_dim = 2048, so every point does the same work per token.
- "exercise": the multi-head exercise's fp32 shapes (N, d_model, h): Q, K, V are N × d_model
  row-major, i.e. batch 1, seqlen N, h heads of head_dim d_model / h.
- "memory": one long sequence, doubled until each implementation runs out of memory; run
  once per implementation to read its peak extra memory, not timed.
- "paper_bwd", "exercise_bwd": the backward on the paper grid and on three exercise shapes,
  each shape twice: the backward alone (pass "bwd": dq, dk, dv from the forward's saved
  results) and a forward and backward together (pass "fwd+bwd", a training step's work).
- "wide", "wide_bwd": the forward, and the backward (both passes), at head dims 320, 384 and
  512, bf16, 16384 tokens, 8 query heads with 8 kv heads or 4 (grouped-query attention:
  Gemma 4's 8 query / 4 kv).
- "variants": the attention variants (score_variants.py), bf16, head_dim 128, 16 heads, the
  forward and the backward alone: a causal sliding window (4096, 0) on 16384 tokens beside
  the dense causal problem of the same work (its seqlen chosen so); softcap 30 and ALiBi,
  causal and not, at 4096 and 16384 tokens (batch × seqlen = 16384), each beside the plain
  problem of the same shape; and a bias or boolean mask tensor passed as attn_mask
  (ATTN_MASKS, MASK_POINTS), beside the plain problem of its shape too: a learned bias per
  head, a key-padding mask and packed documents (causal) at 4 × 4096, one bias shared by
  every head at 1 × 16384.
- "models", "models_bwd": attention layers of models people run (model_shapes.py), each
  named by its model and layer: decoder LLMs' causal prefill with their grouped kv heads,
  encoders, vision transformers, diffusion U-Nets and DiTs up to a 119k-token video, many
  at lengths that are not multiples of 128, and DeepSeek's multi-head latent attention,
  whose v has a head_dim of its own (128 beside q's and k's 192); the forward, and a
  training step's forward and backward ("fwd+bwd") on a few of them.
- "decode", "varlen": inference shapes measured by the standalone scripts' own code
  (SCRIPT_GRIDS): one decoding step over a KV cache, contiguous or paged
  (decode_grid.py, bench/decode.py), and packed batches of sequences of a realistic spread
  of lengths, forward and forward + backward (varlen_grid.py, bench/varlen.py). Their points
  are decode_grid.DecodePoint and varlen_grid.VarlenPoint, which have a label, FLOPs and
  `timed` as Point has.

Pure Python (no torch), so the grids can be listed and tested anywhere.
"""
import dataclasses
import functools
import math
from dataclasses import dataclass

import decode_grid
import model_shapes
import varlen_grid

ITEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2}  # the project's dtype names
MASKS = ("none", "top_left")                   # causal: none, or PyTorch's is_causal

PAPER_TOKENS = 16384
PAPER_MODEL_DIM = 2048
PAPER_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PAPER_HEAD_DIMS = (64, 128, 256)
PAPER_DTYPES = ("bf16", "f16")

EXERCISE_SHAPES = ((1000, 1024, 16), (1000, 1024, 1), (1000, 1024, 1024), (1, 2, 1),
                   (17, 96, 3), (1000, 512, 8), (4096, 1024, 16), (16384, 1024, 16))

# The exercise shapes the backward is timed on.
EXERCISE_BWD_SHAPES = ((1000, 1024, 16), (4096, 1024, 16), (1000, 512, 8))
# What a point times: the forward, the backward alone, or both. FLOPs of each as a multiple
# of the forward's: the backward does five matrix products of the forward's size to its two
# (S = Q·Kᵀ recomputed, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q), 2.5×.
PASSES = ("fwd", "bwd", "fwd+bwd")
PASS_FLOPS = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
# Times each pass must at least read or write the bytes of q, k, v and out: fwd reads q, k,
# v and writes out; bwd reads q, k, v, out and dout and writes dq, dk and dv (each gradient
# its tensor's size, dout out's); fwd+bwd both.
PASS_TENSORS = {"fwd": 1, "bwd": 2, "fwd+bwd": 3}

MEMORY_SEQLENS = tuple(512 * 2**i for i in range(8))  # 512 … 65536
MEMORY_HEADS = 16
MEMORY_HEAD_DIM = 128
MEMORY_DTYPE = "bf16"

# Head dims over FlashAttention's (and PyTorch's flash backend's) limit of 256.
WIDE_HEAD_DIMS = (320, 384, 512)
WIDE_HEADS = ((8, 8), (8, 4))  # (heads_q, heads_kv): plain, and Gemma 4's grouped query heads
WIDE_SEQLENS = (4096, 8192)
WIDE_DTYPES = ("bf16",)

VARIANT_DTYPE = "bf16"
VARIANT_HEADS = 16
VARIANT_HEAD_DIM = 128
WINDOW = (4096, 0)          # (left, right): each query sees itself and the 4096 keys before
WINDOW_SEQLEN = 16384
VARIANT_SEQLENS = (4096, 16384)
SOFTCAP = 30.0              # Gemma 2's attention softcap
DROPOUT = 0.1               # the dropout points' rate
VARIANT_PASSES = ("fwd", "bwd")
# Sequence lengths of the equal-work dense problem are a multiple of this (a key block).
BLOCK = 128

MASK_ITEM_BYTES = {**ITEM_BYTES, "bool": 1}


@dataclass(frozen=True)
class AttnMask:
    """A bias or boolean mask tensor a point passes as attn_mask (score_variants.attn_mask
    draws it): what it holds and its shape in the letters B (batch), H (heads), N (seqlen)
    and 1 (broadcast). A boolean mask is bool (True: attend); a bias has q's dtype, the only
    float dtype PyTorch's SDPA takes for attn_mask."""

    holds: str    # "bias", "key padding" or "documents"
    shape: tuple  # four of "B", "H", "N", "1"

    def dtype(self, q_dtype):
        """"bool", or q's dtype (one of ITEM_BYTES's) for a bias."""
        return q_dtype if self.holds == "bias" else "bool"

    def sizes(self, batch, heads, seqlen):
        size = {"B": batch, "H": heads, "N": seqlen, "1": 1}
        return tuple(size[letter] for letter in self.shape)

    def bytes(self, batch, heads, seqlen, q_dtype):
        return (math.prod(self.sizes(batch, heads, seqlen)) *
                MASK_ITEM_BYTES[self.dtype(q_dtype)])

    def label(self, heads, q_dtype):
        """"bias (1,16,N,N) bf16": the heads as their number, the other sizes as letters."""
        shape = ",".join(str(heads) if letter == "H" else letter for letter in self.shape)
        return f"{self.holds} ({shape}) {self.dtype(q_dtype)}"


# The mask tensors of the variants grid, by the name a Point (and its row) carries.
ATTN_MASKS = {
    # A learned relative-position bias (T5's, or ALiBi's as a tensor): one per head, shared
    # by the batch.
    "head_bias": AttnMask("bias", ("1", "H", "N", "N")),
    # An encoder's padded batch: each sequence attends to its own prefix of the keys.
    "key_padding": AttnMask("key padding", ("B", "1", "1", "N")),
    # Documents packed into one sequence, each attending within itself (with causal).
    "documents": AttnMask("documents", ("1", "1", "N", "N")),
    # One bias for every head of a long sequence (512 MiB in bf16 at 16384 tokens).
    "shared_bias": AttnMask("bias", ("1", "1", "N", "N")),
}
# The points with a mask tensor, (seqlen, causal, mask), each beside the plain point of its
# shape (batch × seqlen = 16384).
MASK_POINTS = ((4096, "none", "head_bias"), (4096, "none", "key_padding"),
               (4096, "top_left", "documents"), (16384, "none", "shared_bias"))
# Times each pass must at least read a mask tensor.
PASS_MASK_READS = {"fwd": 1, "bwd": 1, "fwd+bwd": 2}

# The grids whose points the scripts' code measures (script_grids.py), not measure.py.
SCRIPT_GRIDS = ("decode", "varlen")


@dataclass(frozen=True)
class Point:
    """One problem: q (batch, seqlen, heads, head_dim), k (batch, seqlen, heads_kv,
    head_dim), v (batch, seqlen, heads_kv, head_dim_v), out (batch, seqlen, heads,
    head_dim_v): seqlen_q = seqlen_k; heads_kv divides heads (grouped-query attention, each
    kv head shared by heads / heads_kv query heads) and is heads where not given; head_dim_v
    is head_dim where not given."""

    grid: str
    dtype: str
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    causal: str = "none"
    timed: bool = True
    exercise: tuple = None  # (N, d_model, h) for the exercise grid
    pass_: str = "fwd"      # one of PASSES
    heads_kv: int = None    # None: heads
    window: tuple = None    # (left, right), -1 an open side; None: no window
    softcap: float = 0.0    # > 0: each scaled score s becomes softcap·tanh(s / softcap)
    alibi: bool = False     # ALiBi with the standard slopes
    name: str = None        # the model and layer (grids models, models_bwd)
    attn_mask: str = None   # a key of ATTN_MASKS: the tensor passed as attn_mask; None: none
    dropout: float = 0.0    # > 0: dropout on the probabilities at this rate
    head_dim_v: int = None  # v's (and out's) head_dim; None: head_dim

    def __post_init__(self):
        if self.heads_kv is None:
            object.__setattr__(self, "heads_kv", self.heads)
        if self.head_dim_v is None:
            object.__setattr__(self, "head_dim_v", self.head_dim)

    def flops(self):
        """The forward's 2·B·H·Nq·Nk·(d + d_v) (S = Q·Kᵀ, 2·Nq·Nk·d, and P·V, 2·Nq·Nk·d_v,
        H the query heads: grouping shares k and v, not the work), 4·B·H·Nq·Nk·d where v's
        head_dim d_v is d, halved for causal; with a window, 2·B·H·(d + d_v) times the
        (row, key) pairs it leaves visible. Times 2.5 for the backward, 3.5 for forward and
        backward (PASS_FLOPS)."""
        per_pair = 2 * self.batch * self.heads * (self.head_dim + self.head_dim_v)
        if self.window is not None:
            pairs = visible_pairs(self.seqlen, self.causal != "none", *self.window)
            return PASS_FLOPS[self.pass_] * per_pair * pairs
        full = per_pair * self.seqlen * self.seqlen
        return PASS_FLOPS[self.pass_] * (full / 2 if self.causal != "none" else full)

    def variant_label(self):
        """"window(4096,0) softcap 30 alibi", "documents (1,1,N,N) bool": the point's
        variants, "" for none."""
        parts = [f"window({self.window[0]},{self.window[1]})"] if self.window else []
        parts += [f"softcap {self.softcap:g}"] if self.softcap else []
        parts += ["alibi"] if self.alibi else []
        parts += ([ATTN_MASKS[self.attn_mask].label(self.heads, self.dtype)]
                  if self.attn_mask else [])
        parts += [f"dropout {self.dropout:g}"] if self.dropout else []
        return " ".join(parts)

    def tensor_bytes(self, heads, head_dim):
        """Bytes of a (batch, seqlen, heads, head_dim) tensor of the point's dtype: q (and
        dq) of heads and head_dim, out (and dout) of heads and head_dim_v, k (and dk) of
        heads_kv and head_dim, v (and dv) of heads_kv and head_dim_v."""
        return self.batch * self.seqlen * heads * head_dim * ITEM_BYTES[self.dtype]

    def mask_bytes(self):
        """Bytes of the attn_mask tensor (its broadcast dimensions stored once), 0 without."""
        if not self.attn_mask:
            return 0
        return ATTN_MASKS[self.attn_mask].bytes(self.batch, self.heads, self.seqlen,
                                                self.dtype)

    def min_bytes(self):
        """The fewest bytes one call must move: each tensor of the pass read or written once
        (the forward reads q, k, v and the mask tensor and writes out)."""
        head_dims = self.head_dim + self.head_dim_v  # q and out; k and v
        return (PASS_TENSORS[self.pass_] * (self.tensor_bytes(self.heads, head_dims) +
                                            self.tensor_bytes(self.heads_kv, head_dims)) +
                PASS_MASK_READS[self.pass_] * self.mask_bytes())

    def label(self):
        mask = "" if self.causal == "none" else " causal"
        shape = (f"B{self.batch} N{self.seqlen} H{heads_label(self.heads, self.heads_kv)} "
                 f"d{head_dims_label(self.head_dim, self.head_dim_v)}")
        if self.exercise:
            n, d_model, h = self.exercise
            shape = f"N={n} d_model={d_model} h={h} (d{self.head_dim})"
        step = "" if self.pass_ == "fwd" else f" {self.pass_}"
        variant = f" {self.variant_label()}" if self.variant_label() else ""
        model = f"{self.name}: " if self.name else ""
        return f"{model}{shape} {self.dtype}{mask}{variant}{step}"


@functools.lru_cache(maxsize=None)
def visible_pairs(seqlen, causal, left, right):
    """(row, key) pairs a window leaves visible in a square problem: row i sees keys
    max(0, i - left) .. min(seqlen - 1, i + right), a side -1 open, causal capping the right
    side at 0."""
    if causal:
        right = 0
    pairs = 0
    for i in range(seqlen):
        first = 0 if left < 0 else max(0, i - left)
        last = seqlen - 1 if right < 0 else min(seqlen - 1, i + right)
        pairs += max(0, last - first + 1)
    return pairs


def equal_work_seqlen(pairs):
    """The causal sequence length, a multiple of BLOCK, whose seqlen²/2 is nearest `pairs`:
    the dense problem that does a window's work."""
    return max(BLOCK, BLOCK * round(math.sqrt(2 * pairs) / BLOCK))


def heads_label(heads_q, heads_kv):
    """"8", or "8/4" where 8 query heads share 4 kv heads."""
    return str(heads_q) if heads_kv in (None, heads_q) else f"{heads_q}/{heads_kv}"


def head_dims_label(head_dim, head_dim_v):
    """"128", or "192/128" where v's head_dim (128) differs from q's and k's (192)."""
    return str(head_dim) if head_dim_v in (None, head_dim) else f"{head_dim}/{head_dim_v}"


def paper_points(seqlens=PAPER_SEQLENS, head_dims=PAPER_HEAD_DIMS, dtypes=PAPER_DTYPES,
                 masks=MASKS, passes=("fwd",), grid="paper"):
    return [Point(grid, dtype, PAPER_TOKENS // n, n, PAPER_MODEL_DIM // d, d, mask,
                  pass_=pass_)
            for dtype in dtypes for d in head_dims for mask in masks for n in seqlens
            for pass_ in passes]


def exercise_points(shapes=EXERCISE_SHAPES, masks=MASKS, passes=("fwd",), grid="exercise"):
    return [Point(grid, "f32", 1, n, h, d_model // h, mask, exercise=(n, d_model, h),
                  pass_=pass_)
            for n, d_model, h in shapes for mask in masks for pass_ in passes]


BACKWARD_PASSES = ("bwd", "fwd+bwd")


def paper_bwd_points(**kwargs):
    return paper_points(passes=BACKWARD_PASSES, grid="paper_bwd", **kwargs)


def exercise_bwd_points(shapes=EXERCISE_BWD_SHAPES, **kwargs):
    return exercise_points(shapes, passes=BACKWARD_PASSES, grid="exercise_bwd", **kwargs)


def wide_points(head_dims=WIDE_HEAD_DIMS, heads=WIDE_HEADS, seqlens=WIDE_SEQLENS,
                dtypes=WIDE_DTYPES, masks=MASKS, passes=("fwd",), grid="wide"):
    return [Point(grid, dtype, PAPER_TOKENS // n, n, heads_q, d, mask, pass_=pass_,
                  heads_kv=heads_kv)
            for dtype in dtypes for d in head_dims for heads_q, heads_kv in heads
            for mask in masks for n in seqlens for pass_ in passes]


def wide_bwd_points(passes=BACKWARD_PASSES, **kwargs):
    return wide_points(passes=passes, grid="wide_bwd", **kwargs)


def variants_points(seqlens=VARIANT_SEQLENS, masks=MASKS, passes=VARIANT_PASSES, window=True):
    """Per pass: the window point and its equal-work dense point (with `window`), then at each
    seqlen and mask the plain, softcap, ALiBi and dropout points of one shape and the
    MASK_POINTS of that shape, side by side."""
    shape = dict(grid="variants", dtype=VARIANT_DTYPE, heads=VARIANT_HEADS,
                 head_dim=VARIANT_HEAD_DIM)
    points = []
    for pass_ in passes:
        if window:
            windowed = Point(batch=PAPER_TOKENS // WINDOW_SEQLEN, seqlen=WINDOW_SEQLEN,
                             causal="top_left", pass_=pass_, window=WINDOW, **shape)
            pairs = visible_pairs(WINDOW_SEQLEN, True, *WINDOW)
            points += [windowed, Point(batch=windowed.batch, seqlen=equal_work_seqlen(pairs),
                                       causal="top_left", pass_=pass_, **shape)]
        for n in seqlens:
            for mask in masks:
                plain = Point(batch=PAPER_TOKENS // n, seqlen=n, causal=mask, pass_=pass_,
                              **shape)
                points += [plain, dataclasses.replace(plain, softcap=SOFTCAP),
                           dataclasses.replace(plain, alibi=True),
                           dataclasses.replace(plain, dropout=DROPOUT)]
                points += [dataclasses.replace(plain, attn_mask=name)
                           for seqlen, causal, name in MASK_POINTS
                           if (seqlen, causal) == (n, mask)]
    return points


def models_points(layers=model_shapes.FORWARD, pass_="fwd", grid="models"):
    """The model layers (model_shapes.Layer) as points of one pass."""
    return [Point(grid, layer.dtype, layer.batch, layer.seqlen, layer.heads, layer.head_dim,
                  "top_left" if layer.causal else "none", pass_=pass_,
                  heads_kv=layer.heads_kv, name=layer.name, head_dim_v=layer.head_dim_v)
            for layer in layers]


def models_bwd_points(layers=model_shapes.TRAINING):
    return models_points(layers, pass_="fwd+bwd", grid="models_bwd")


def named(layers, names):
    """The layers of `names`, in the order of `layers`."""
    return tuple(layer for layer in layers if layer.name in names)


def memory_points(seqlens=MEMORY_SEQLENS):
    return [Point("memory", MEMORY_DTYPE, 1, n, MEMORY_HEADS, MEMORY_HEAD_DIM, timed=False)
            for n in seqlens]


def full_suite(paper_head_dims=PAPER_HEAD_DIMS, wide_head_dims=WIDE_HEAD_DIMS):
    """Every grid; `paper_head_dims` replaces the paper grids' head dims (bench/run
    --head-dims: 96 and 192, say, which the tensor-core backwards run padded), and
    `wide_head_dims` the wide grids' (--wide-head-dims: 264 or 448, say, inside the 384
    and 512 buckets)."""
    return {"paper": paper_points(head_dims=paper_head_dims), "exercise": exercise_points(),
            "memory": memory_points(),
            "paper_bwd": paper_bwd_points(head_dims=paper_head_dims),
            "exercise_bwd": exercise_bwd_points(),
            "wide": wide_points(head_dims=wide_head_dims),
            "wide_bwd": wide_bwd_points(head_dims=wide_head_dims), "variants": variants_points(),
            "models": models_points(), "models_bwd": models_bwd_points(),
            "decode": decode_grid.suite_points(), "varlen": varlen_grid.suite_points()}


def quick_suite():
    """A few representative points, about two minutes of GPU time (forward): the headline
    shape (head_dim 128) short and long, two exercise shapes, memory at three sizes; the
    backward on the same headline shapes and one exercise shape; one wide-head backward
    point: d512, causal, Gemma 4's 8 query heads on 4 kv heads; the variants at 4096
    tokens, causal, forward (with the window pair and the packed documents' mask); the
    model layers users reported slow and a long LLM prefill, forward, and one LLM training
    step; five decode steps (one paged) and the 16k-token packed batch, both passes."""
    return {"paper": paper_points(seqlens=(2048, 8192), head_dims=(128,), dtypes=("bf16",)),
            "exercise": exercise_points(shapes=((1000, 1024, 16), (4096, 1024, 16)),
                                        masks=("none",)),
            "memory": memory_points(seqlens=(2048, 8192, 32768)),
            "paper_bwd": paper_bwd_points(seqlens=(2048, 8192), head_dims=(128,),
                                          dtypes=("bf16",)),
            "exercise_bwd": exercise_bwd_points(shapes=((1000, 1024, 16),), masks=("none",)),
            "wide_bwd": wide_bwd_points(head_dims=(512,), heads=((8, 4),), seqlens=(8192,),
                                        masks=("top_left",), passes=("bwd",)),
            "variants": variants_points(seqlens=(4096,), masks=("top_left",),
                                        passes=("fwd",)),
            "models": models_points(named(model_shapes.FORWARD, model_shapes.QUICK_FORWARD)),
            "models_bwd": models_bwd_points(named(model_shapes.TRAINING,
                                                  model_shapes.QUICK_TRAINING)),
            "decode": decode_grid.quick_points(), "varlen": varlen_grid.quick_points()}
