"""A decode step's GPU time against the split count it is forced to: one step of
flashattn.attention_with_kvcache (one query row per sequence, appended with its key and value,
causal bottom-right, unchecked) on a contiguous cache, or a paged one with --page-size (pages
a random permutation of the pool, as bench/decode.py lays them, or with --page-order sequential
each sequence's pages consecutive), with num_splits = 0 (the automatic
choice) and each forced count, timed as bench/decode.py times a step (inputs rotated among
copies when they fit in L2). What the automatic choice (decode.cu's key_splits) is measured
against.

    PYTHONPATH=python:bench FLASHATTN_LIBRARY=build/libflashattn.so \\
        python3 bench/decode_splits.py [--splits 0,2,4,8,12,16,32,64] [--points B1xL1k,B8xL8k]
        [--page-size 64 [--page-order sequential]]
"""
import argparse
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode  # noqa: E402
import timing  # noqa: E402
from decode_grid import Config  # noqa: E402

# (batch, keys per sequence) of bf16, 32 query heads on 8 kv heads, head_dim 128.
POINTS = "B1xL1k,B1xL8k,B1xL32k,B1xL128k,B8xL1k,B8xL8k,B8xL32k,B32xL1k"


def parse_point(text):
    batch, length = text.upper().split("XL")
    return int(batch.lstrip("B")), int(length.rstrip("K")) * 1024


def step_times(config, counts, budget_ms, page_size=None, page_order="random"):
    """The median GPU µs of one step forced to each count (0: automatic), on one cache
    (contiguous, or paged in pages of page_size keys laid in page_order)."""
    step = decode.make_step(config, 1, True)
    copies = timing.copies_needed(config.cache_bytes(page_size))
    caches = decode.cache_copies(config, page_size, 0, copies, page_order)
    budget = types.SimpleNamespace(budget_ms=budget_ms)
    times = []
    for splits in counts:
        call = decode.flashattn_call(step, caches, checked=False, num_splits=splits)
        ms, _ = decode.gpu_time(call, copies, budget)
        times.append(ms * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", default="0,2,4,8,12,16,32,64")
    parser.add_argument("--points", default=POINTS)
    parser.add_argument("--budget-ms", type=float, default=30.0)
    parser.add_argument("--page-size", type=int, default=None,
                        help="keys per page of a paged cache (default: contiguous)")
    parser.add_argument("--page-order", choices=("random", "sequential"), default="random",
                        help="a paged cache's pages in the pool: a random permutation (as "
                        "bench/decode.py lays them) or each sequence's consecutive")
    args = parser.parse_args()
    counts = [int(s) for s in args.splits.split(",")]
    print(f"{'point':34s}" + "".join(f"{'auto' if s == 0 else s:>9}" for s in counts))
    for text in args.points.split(","):
        batch, length = parse_point(text)
        config = Config("bf16", 32, 8, 128, batch, length, 1)
        times = step_times(config, counts, args.budget_ms, args.page_size, args.page_order)
        layout = f" paged{args.page_size}" if args.page_size else ""
        layout += " sequential" if args.page_size and args.page_order == "sequential" else ""
        print(f"{config.name + layout:34s}" + "".join(f"{us:9.1f}" for us in times), flush=True)


if __name__ == "__main__":
    main()
