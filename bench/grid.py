"""The benchmark's points: which shapes, dtypes and masks each part of the suite runs.

Three grids:
- "paper": the FlashAttention papers' forward grid: batch × seqlen = 16384 tokens and
  heads × head_dim = 2048, so every point does the same work per token.
- "exercise": the multi-head exercise's fp32 shapes (N, d_model, h): Q, K, V are N × d_model
  row-major, i.e. batch 1, seqlen N, h heads of head_dim d_model / h.
- "memory": one long sequence, doubled until each implementation runs out of memory; run
  once per implementation to read its peak extra memory, not timed.

Pure Python (no torch), so the grids can be listed and tested anywhere.
"""
from dataclasses import dataclass

ITEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2}  # the project's dtype names
MASKS = ("none", "top_left")                   # causal: none, or PyTorch's is_causal

PAPER_TOKENS = 16384
PAPER_MODEL_DIM = 2048
PAPER_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PAPER_HEAD_DIMS = (64, 128, 256)
PAPER_DTYPES = ("bf16", "f16")

EXERCISE_SHAPES = ((1000, 1024, 16), (1000, 1024, 1), (1000, 1024, 1024), (1, 2, 1),
                   (17, 96, 3), (1000, 512, 8), (4096, 1024, 16), (16384, 1024, 16))

MEMORY_SEQLENS = tuple(512 * 2**i for i in range(8))  # 512 … 65536
MEMORY_HEADS = 16
MEMORY_HEAD_DIM = 128
MEMORY_DTYPE = "bf16"


@dataclass(frozen=True)
class Point:
    """One problem: (batch, seqlen, heads, head_dim) q, k and v with seqlen_q = seqlen_k and
    heads_q = heads_kv."""

    grid: str
    dtype: str
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    causal: str = "none"
    timed: bool = True
    exercise: tuple = None  # (N, d_model, h) for the exercise grid

    def flops(self):
        """4·B·H·Nq·Nk·d (two matrix products of 2·Nq·Nk·d each), halved for causal."""
        full = 4 * self.batch * self.heads * self.seqlen * self.seqlen * self.head_dim
        return full / 2 if self.causal != "none" else full

    def tensor_bytes(self):
        """Bytes of one of q, k, v or out."""
        return self.batch * self.seqlen * self.heads * self.head_dim * ITEM_BYTES[self.dtype]

    def min_bytes(self):
        """The fewest bytes one call must move: read q, k, v once and write out once."""
        return 4 * self.tensor_bytes()

    def label(self):
        mask = "" if self.causal == "none" else " causal"
        shape = f"B{self.batch} N{self.seqlen} H{self.heads} d{self.head_dim}"
        if self.exercise:
            n, d_model, h = self.exercise
            shape = f"N={n} d_model={d_model} h={h} (d{self.head_dim})"
        return f"{shape} {self.dtype}{mask}"


def paper_points(seqlens=PAPER_SEQLENS, head_dims=PAPER_HEAD_DIMS, dtypes=PAPER_DTYPES,
                 masks=MASKS):
    return [Point("paper", dtype, PAPER_TOKENS // n, n, PAPER_MODEL_DIM // d, d, mask)
            for dtype in dtypes for d in head_dims for mask in masks for n in seqlens]


def exercise_points(shapes=EXERCISE_SHAPES, masks=MASKS):
    return [Point("exercise", "f32", 1, n, h, d_model // h, mask, exercise=(n, d_model, h))
            for n, d_model, h in shapes for mask in masks]


def memory_points(seqlens=MEMORY_SEQLENS):
    return [Point("memory", MEMORY_DTYPE, 1, n, MEMORY_HEADS, MEMORY_HEAD_DIM, timed=False)
            for n in seqlens]


def full_suite():
    return {"paper": paper_points(), "exercise": exercise_points(), "memory": memory_points()}


def quick_suite():
    """A few representative points, about two minutes of GPU time: the headline shape
    (head_dim 128) short and long, two exercise shapes, memory at three sizes."""
    return {"paper": paper_points(seqlens=(2048, 8192), head_dims=(128,), dtypes=("bf16",)),
            "exercise": exercise_points(shapes=((1000, 1024, 16), (4096, 1024, 16)),
                                        masks=("none",)),
            "memory": memory_points(seqlens=(2048, 8192, 32768))}
