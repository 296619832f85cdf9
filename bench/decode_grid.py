"""The decode problems: one step over a KV cache (seqlen_q new queries per sequence against
L keys, causal bottom-right), in a contiguous cache or a paged one. bench/decode.py times
them; bench/run's "decode" grid is decode.py's default grid extended to the ranges issue 24
asks for, each (problem, cache layout) one point.

Pure Python (no torch), so the grids can be listed and tested anywhere.
"""
import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from typing import Optional

K = 1024
ELEMENT_BYTES = {"bf16": 2, "f16": 2}
# decode.py's default --max-gb: caches (k and v) larger than this many GB are left out.
MAX_GB = 40.0


@dataclass(frozen=True)
class Config:
    """One decode problem; its rows are its cache layouts (None: contiguous; else the page
    size)."""

    dtype: str
    heads_q: int
    heads_kv: int
    head_dim: int
    batch: int
    length: int        # keys per sequence after the step (cached + appended)
    seqlen_q: int
    layouts: tuple = (None,)

    @property
    def name(self):
        length = f"{self.length // K}k" if self.length % K == 0 else str(self.length)
        return (f"{self.dtype} H{self.heads_q}/{self.heads_kv} d{self.head_dim} B{self.batch} "
                f"L{length} q{self.seqlen_q}")

    def capacity(self, page_size):
        return self.length if page_size is None else math.ceil(self.length / page_size) * page_size

    def cache_bytes(self, page_size=None):
        """k and v of the cache."""
        element = ELEMENT_BYTES[self.dtype]
        return 2 * self.batch * self.capacity(page_size) * self.heads_kv * self.head_dim * element

    def kv_bytes_read(self):
        element = ELEMENT_BYTES[self.dtype]
        return 2 * self.batch * self.length * self.heads_kv * self.head_dim * element


def layout_name(page_size):
    return "contiguous" if page_size is None else f"paged{page_size}"


def default_grid():
    """About 40 rows: bf16, 32 query heads on 8 kv heads, d 128, seqlen_q 1 over batch ×
    length; pages of 16, 32, 64, 256 at three of those (32: the sizes under 64 that the
    kernel addresses a page at a time are 16 and 32); GQA groups 1 and 8, head dims 64 and 256,
    seqlen_q 4 and f16 at two or three."""
    base = dict(dtype="bf16", heads_q=32, heads_kv=8, head_dim=128, seqlen_q=1)
    paged_at = {(8, 8 * K), (32, 32 * K), (1, 128 * K)}
    configs = []
    for batch, length in itertools.product((1, 8, 32, 128), (1 * K, 8 * K, 32 * K, 128 * K)):
        layouts = (None, 16, 32, 64, 256) if (batch, length) in paged_at else (None,)
        configs.append(Config(**base, batch=batch, length=length, layouts=layouts))
    pairs = ((8, 8 * K), (32, 32 * K))
    for (batch, length), heads_kv in itertools.product(pairs, (32, 4)):
        configs.append(Config(**dict(base, heads_kv=heads_kv), batch=batch, length=length))
    for (batch, length), head_dim in itertools.product(pairs, (64, 256)):
        configs.append(Config(**dict(base, head_dim=head_dim), batch=batch, length=length))
    for batch, length in pairs + ((128, 8 * K),):
        layouts = (None, 64) if (batch, length) == (32, 32 * K) else (None,)
        configs.append(Config(**dict(base, seqlen_q=4), batch=batch, length=length,
                              layouts=layouts))
    for batch, length in pairs:
        configs.append(Config(**dict(base, dtype="f16"), batch=batch, length=length))
    return configs


def full_grid():
    """Every combination of GQA group (kv heads 32, 8, 4), head dim (64, 128, 256), batch (1,
    8, 32, 128), length (1k, 8k, 32k, 128k) and seqlen_q (1, 4) in bf16, each contiguous and
    paged (16, 64, 256); f16 at 32/8 heads, d 128, seqlen_q 1."""
    configs = []
    for heads_kv, head_dim, batch, length, seqlen_q in itertools.product(
            (32, 8, 4), (64, 128, 256), (1, 8, 32, 128), (1 * K, 8 * K, 32 * K, 128 * K), (1, 4)):
        configs.append(Config("bf16", 32, heads_kv, head_dim, batch, length, seqlen_q,
                              (None, 16, 64, 256)))
    for batch, length in itertools.product((1, 8, 32, 128), (1 * K, 8 * K, 32 * K, 128 * K)):
        configs.append(Config("f16", 32, 8, 128, batch, length, 1, (None, 64)))
    return configs


def selected(configs, match=None, max_gb=MAX_GB):
    """The configs within max_gb (their layouts too) and matching the regular expression
    `match` (on "name layout"); the skipped ones, with why."""
    keep, skipped = [], []
    pattern = re.compile(match) if match else None
    for config in configs:
        layouts = tuple(page for page in config.layouts
                        if pattern is None or pattern.search(f"{config.name} {layout_name(page)}"))
        if not layouts:
            continue
        too_big = [page for page in layouts if config.cache_bytes(page) > max_gb * 1e9]
        for page in too_big:
            skipped.append((config, page, f"cache {config.cache_bytes(page) / 1e9:.1f} GB > "
                                          f"--max-gb {max_gb:g}"))
        layouts = tuple(page for page in layouts if page not in too_big)
        if layouts:
            keep.append(dataclasses.replace(config, layouts=layouts))
    return keep, skipped


# bench/run's grid --------------------------------------------------------------------------

@dataclass(frozen=True)
class DecodePoint:
    """One row of decode.py's table as a point of bench/run: a config on one cache layout."""

    config: Config
    page_size: Optional[int] = None
    grid: str = "decode"
    timed: bool = True

    def label(self):
        """"bf16 H32/8 d128 B32 L32k q1 paged64": what decode.py's --match reads."""
        return f"{self.config.name} {layout_name(self.page_size)}"

    def flops(self):
        """4·B·Hq·d per visible (query, key) pair: bottom-right causal, query row i of
        seqlen_q sees L - seqlen_q + i + 1 keys."""
        c = self.config
        pairs = c.seqlen_q * c.length - c.seqlen_q * (c.seqlen_q - 1) // 2
        return 4 * c.batch * c.heads_q * c.head_dim * pairs

    def cache_bytes(self):
        return self.config.cache_bytes(self.page_size)


def suite_configs():
    """decode.py's default grid with the issue's ranges it leaves out where they are cheap:
    f16 on a paged cache (pages of 64) at one point and seqlen_q 8 (a speculative step's
    draft tokens) at one."""
    configs = []
    for config in default_grid():
        if config.dtype == "f16" and (config.batch, config.length) == (32, 32 * K):
            config = dataclasses.replace(config, layouts=(None, 64))
        configs.append(config)
    configs.append(Config("bf16", 32, 8, 128, 32, 32 * K, 8))
    return configs


# The few points --quick times: short and long caches, a paged one, four queries per step.
QUICK = ("bf16 H32/8 d128 B8 L8k q1 contiguous", "bf16 H32/8 d128 B32 L32k q1 contiguous",
         "bf16 H32/8 d128 B32 L32k q1 paged64", "bf16 H32/8 d128 B1 L128k q1 contiguous",
         "bf16 H32/8 d128 B128 L8k q4 contiguous")


def suite_points(configs=None, max_gb=MAX_GB):
    """The points of bench/run's decode grid: each config's layouts within max_gb."""
    kept, _ = selected(suite_configs() if configs is None else configs, max_gb=max_gb)
    return [DecodePoint(config, page) for config in kept for page in config.layouts]


def quick_points():
    return [p for p in suite_points() if p.label() in QUICK]


def configs_of(points):
    """The points regrouped into configs, each with the layouts chosen, in the points'
    order: decode.run_config times a config's layouts together (PyTorch's SDPA once, on
    the contiguous cache)."""
    layouts = {}
    for point in points:
        config = dataclasses.replace(point.config, layouts=(None,))
        layouts.setdefault(config, []).append(point.page_size)
    return [dataclasses.replace(config, layouts=tuple(pages)) for config, pages in layouts.items()]
