"""KV caches for the tests of flashattn.attention_with_kvcache: random contiguous and paged
caches (pages in a random permutation, spare pages no sequence uses), the cache expected
after appending, and the float64 reference computed per sequence on the keys gathered from
the cache. NumPy; the torch tests convert. Shared by the NumPy, CPU and CUDA tests."""
import math
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from attention_reference import reference_attention
from variant_cases import options_with_slopes

# The cache layouts: None is contiguous, a number the page size of a paged cache.
LAYOUTS = [None, 1, 3, 16]
LAYOUT_IDS = ["contiguous", "paged1", "paged3", "paged16"]

# The option cases, in attention_with_kvcache's keywords (FlashAttention's); "alibi": True
# stands for variant_cases.alibi_slopes(heads_q) in the caller's array type.
CASES = [
    ("plain", {}),
    ("causal", dict(causal=True)),
    ("causal_window", dict(causal=True, window_size=(4, 0))),
    ("window", dict(window_size=(3, 1))),
    ("softcap_alibi", dict(causal=True, softcap=3.0, softmax_scale=0.5, alibi=True)),
]
CASE_IDS = [case[0] for case in CASES]


@dataclass
class Problem:
    """One KV-cache call's inputs: q (batch, seqlen_q, heads_q, head_dim); the cache,
    contiguous (batch, capacity, heads_kv, head_dim) or paged (pages, page_size, heads_kv,
    head_dim) with block_table (batch, pages_per_sequence); cache_seqlens (batch,) int32;
    k_new, v_new (batch, seqlen_new, heads_kv, head_dim) or None. v_cache and v_new may
    have a head_dim of their own (head_dim_v)."""

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    k_new: Optional[np.ndarray]
    v_new: Optional[np.ndarray]
    cache_seqlens: np.ndarray
    block_table: Optional[np.ndarray]

    @property
    def page_size(self):
        return None if self.block_table is None else self.k_cache.shape[1]

    @property
    def capacity(self):
        if self.block_table is None:
            return self.k_cache.shape[1]
        return self.block_table.shape[1] * self.k_cache.shape[1]

    @property
    def seqlen_new(self):
        return 0 if self.k_new is None else self.k_new.shape[1]

    @property
    def lengths(self):
        """Each sequence's length after the call: cached plus appended keys."""
        return self.cache_seqlens.astype(np.int64) + self.seqlen_new

    def copy(self):
        return replace(self, **{name: None if value is None else value.copy()
                                for name, value in vars(self).items()})


def capacity_of(page_size, capacity):
    """The capacity of a layout asked for `capacity` keys: whole pages when paged."""
    return capacity if page_size is None else math.ceil(capacity / page_size) * page_size


def default_cached(capacity, seqlen_new):
    """Cached lengths of five sequences: empty, one key, short, about half, and as many as
    leave the cache exactly full after appending seqlen_new."""
    return [0, 1, 6, capacity // 2 + 1, capacity - seqlen_new]


def make_problem(*, seqlen_q=1, seqlen_new=0, cached=None, heads=(4, 2), head_dim=16,
                 page_size=None, capacity=20, dtype=np.float32, seed=0, spare_pages=3,
                 head_dim_v=None):
    """A random Problem. Every row of the cache holds random values (keys past a sequence's
    length and spare pages too: they must never be read). cached: the keys cached per
    sequence (default_cached of the layout's capacity by default). head_dim_v: v_cache's
    and v_new's head_dim (default head_dim)."""
    rng = np.random.default_rng(seed)
    capacity = capacity_of(page_size, capacity)
    cached = default_cached(capacity, seqlen_new) if cached is None else cached
    batch, (heads_q, heads_kv) = len(cached), heads

    def draw(*shape):
        return rng.standard_normal(shape).astype(dtype)
    head_dim_v = head_dim_v or head_dim
    if page_size is None:
        cache_shape, block_table = (batch, capacity, heads_kv), None
    else:
        pages_per_sequence = capacity // page_size
        pages = batch * pages_per_sequence + spare_pages
        block_table = rng.permutation(pages)[:batch * pages_per_sequence].reshape(
            batch, pages_per_sequence).astype(np.int32)
        cache_shape = (pages, page_size, heads_kv)
    new = ((draw(batch, seqlen_new, heads_kv, head_dim), draw(batch, seqlen_new, heads_kv,
                                                              head_dim_v))
           if seqlen_new else (None, None))
    return Problem(draw(batch, seqlen_q, heads_q, head_dim), draw(*cache_shape, head_dim),
                   draw(*cache_shape, head_dim_v), *new, np.asarray(cached, np.int32),
                   block_table)


def position(problem, b, j):
    """The (first, second) index of sequence b's key j in the cache arrays."""
    if problem.block_table is None:
        return b, j
    page_size = problem.page_size
    return int(problem.block_table[b, j // page_size]), j % page_size


def expected_caches(problem):
    """(k_cache, v_cache) as the call must leave them: k_new and v_new written at rows
    cache_seqlens[b] ... of each sequence, every other element unchanged."""
    k_cache, v_cache = problem.k_cache.copy(), problem.v_cache.copy()
    for b, cached in enumerate(problem.cache_seqlens):
        for r in range(problem.seqlen_new):
            at = position(problem, b, int(cached) + r)
            k_cache[at] = problem.k_new[b, r]
            v_cache[at] = problem.v_new[b, r]
    return k_cache, v_cache


def gathered(problem, cache, b):
    """Sequence b's keys (or values) 0 .. length - 1 from `cache`, (length, heads_kv,
    head_dim)."""
    rows = [cache[position(problem, b, j)] for j in range(int(problem.lengths[b]))]
    return np.stack(rows) if rows else np.zeros((0, *cache.shape[2:]), cache.dtype)


def reference_options(options):
    """attention_with_kvcache's keywords as reference_attention's: softmax_scale is its
    scale, causal is aligned bottom-right, and the rest (num_splits, checked, backend) does
    not change the result."""
    options = {name: value for name, value in options.items()
               if name not in ("num_splits", "checked", "backend")}
    if "softmax_scale" in options:
        options["scale"] = options.pop("softmax_scale")
    if options.get("causal"):
        options["causal_alignment"] = "bottom_right"
    return options


def reference(problem, **options):
    """The float64 (out, lse) of the call: each sequence alone, on its keys gathered from the
    cache after appending (expected_caches), bottom-right aligned. options: the call's
    keywords, alibi_slopes a NumPy array."""
    k_cache, v_cache = expected_caches(problem)
    outs, lses = [], []
    for b in range(problem.q.shape[0]):
        out, lse = reference_attention(problem.q[b:b + 1], gathered(problem, k_cache, b)[None],
                                       gathered(problem, v_cache, b)[None],
                                       **reference_options(options))
        outs.append(out)
        lses.append(lse)
    return np.concatenate(outs), np.concatenate(lses)


def case_options(options, heads_q, as_array=np.asarray):
    """A case's options with ALiBi's slopes made by as_array (variant_cases)."""
    return options_with_slopes(options, heads_q, as_array)
