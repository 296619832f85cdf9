"""Decoding over a KV cache: one step of flashattn.attention_with_kvcache (seqlen_q new queries
per sequence, their keys and values appended, causal bottom-right) against PyTorch's fastest
SDPA backend on the same work, timed in one process on one GPU.

For each point (dtype, query/kv heads, head_dim, batch, keys per sequence L, seqlen_q, cache
layout: contiguous or paged with a page size) it times
  - flashattn unchecked (checked=False, the serving configuration: no host wait), GPU time;
  - flashattn checked (checked=True: the library reads the lengths and block table to the
    host, a stream wait per call), host wall time per call;
  - the unchecked step captured in a CUDA graph (torch.cuda.CUDAGraph), replay GPU time; the
    replay's output must equal the eager call's (a warning otherwise);
  - PyTorch's SDPA (flash, efficient, cudnn, math: each that runs, the fastest reported) with
    q (B, Hq, seqlen_q, d) against the contiguous cache sliced to L keys, transposed to
    (B, Hkv, L, d) (enable_gqa=True); seqlen_q > 1 takes the lower-right causal mask
    (torch.nn.attention.bias.causal_lower_right, which runs on flash where it can, else an
    explicit boolean mask). SDPA is timed once per point, on the contiguous cache: alone,
    and (where the step appends) as PyTorch would do the step's whole work, the new keys and
    values written into the cache (two slice copies) before the fastest backend's call. The
    speedup is over the latter, the same work as flashattn's step.
KV bytes read per step are 2·B·L·Hkv·d·element size; TB/s is that over the time, and "of
copy" its ratio to the measured device-to-device copy bandwidth (clone of a 2 GiB tensor,
bytes read + written over the time). Each flashattn output is checked against PyTorch's
(relative L2; a warning above the dtype's tolerance). Every sequence has L keys after the
step (L - seqlen_q cached, seqlen_q appended); a paged cache's pages are a random
permutation of the pool. Inputs smaller than a few L2 caches rotate among copies
(bench/timing.py). Points whose cache exceeds --max-gb are skipped.

    PYTHONPATH=python FLASHATTN_LIBRARY=build/libflashattn.so python3 bench/decode.py \\
        --out decode.md [--full] [--match REGEX] [--dry-run]

Writes the markdown table to --out and one JSON object per row to the .jsonl beside it
(both rewritten as the run goes, so a run cut short keeps its rows). The default grid (about
40 rows) is sized for about a minute on an H100; --full times every combination. The grids
are decode_grid.py's; bench/run --grids decode times the same steps (this default grid, with
f16 on a paged cache and seqlen_q 8 added) into the suite's results and report.
"""
import argparse
import dataclasses
import datetime
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

import decode_report
import flashattn
import timing
from decode_grid import MAX_GB, default_grid, full_grid, layout_name, selected

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
# Relative L2 between flashattn's output and PyTorch's above which a point is flagged.
TOLERANCE = {"bf16": 2e-2, "f16": 5e-3}
# The math backend materialises the scores and repeats grouped k and v per query head: not
# tried where that would take more than this much memory.
MATH_LIMIT_BYTES = 8 << 30


# Inputs -----------------------------------------------------------------------------------

def sequence_values(config, seed, b, rows, device="cuda"):
    """Sequence b's first `rows` keys or values, (rows, heads_kv, head_dim): the same for
    every layout of a config, so their outputs compare."""
    generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + b)
    return torch.randn(rows, config.heads_kv, config.head_dim, generator=generator,
                       device=device, dtype=DTYPES[config.dtype])


def build_cache(config, page_size, seed, page_order="random"):
    """(k_cache, v_cache, block_table or None) holding each sequence's values; the pages a
    random permutation of the pool, or with page_order "sequential" each sequence's pages
    consecutive in it (the memory's placement as a variable apart from the paging)."""
    capacity = config.capacity(page_size)
    shape_tail = (config.heads_kv, config.head_dim)
    dtype = DTYPES[config.dtype]
    if page_size is None:
        k_cache = torch.empty(config.batch, capacity, *shape_tail, device="cuda", dtype=dtype)
        v_cache = torch.empty_like(k_cache)
        table = None
    else:
        pages_per_sequence = capacity // page_size
        pages = config.batch * pages_per_sequence
        generator = torch.Generator(device="cuda").manual_seed(seed)
        if page_order == "sequential":
            table = torch.arange(pages, device="cuda", dtype=torch.int32)
        else:
            table = torch.randperm(pages, generator=generator, device="cuda").to(torch.int32)
        table = table.view(config.batch, pages_per_sequence)
        k_cache = torch.empty(pages, page_size, *shape_tail, device="cuda", dtype=dtype)
        v_cache = torch.empty_like(k_cache)
    for b in range(config.batch):
        for cache, offset in ((k_cache, 0), (v_cache, 1 << 20)):
            values = sequence_values(config, 2 * seed + offset, b, config.length)
            if table is None:
                cache[b, :config.length] = values
            else:
                padded = values.new_zeros(capacity, *shape_tail)
                padded[:config.length] = values
                cache[table[b].long()] = padded.view(-1, page_size, *shape_tail)
    return k_cache, v_cache, table


def cache_copies(config, page_size, seed, copies, page_order="random"):
    """`copies` caches holding the same values (the first built, the rest its clones), to
    rotate a step's inputs among."""
    first = build_cache(config, page_size, seed, page_order)
    return [first] + [tuple(None if t is None else t.clone() for t in first)
                      for _ in range(copies - 1)]


@dataclass
class Step:
    """One decode step's inputs beyond the cache, shared by every layout of a config."""

    q: torch.Tensor
    k_new: Optional[torch.Tensor]
    v_new: Optional[torch.Tensor]
    cache_seqlens: torch.Tensor


def make_step(config, seed, append):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    dtype = DTYPES[config.dtype]

    def draw(heads):
        return torch.randn(config.batch, config.seqlen_q, heads, config.head_dim,
                           generator=generator, device="cuda", dtype=dtype)
    appended = config.seqlen_q if append else 0
    cached = torch.full((config.batch,), config.length - appended, dtype=torch.int32,
                        device="cuda")
    new = (draw(config.heads_kv), draw(config.heads_kv)) if append else (None, None)
    return Step(draw(config.heads_q), *new, cached)


# Timing -----------------------------------------------------------------------------------

def budget(args):
    return timing.Budget(args.budget_ms, 10, 1000, 4 * args.budget_ms)


def gpu_time(call, copies, args):
    """Median GPU ms of call(i) over the budget, and the host's ms to issue one call."""
    call(0)  # warm-up: handles, plans, pools
    _, estimate = timing.timed_once(lambda: call(0))
    times, host_ms, _ = timing.time_calls(call, copies, budget(args), max(estimate, 1e-3))
    return statistics.median(times), host_ms


def wall_time(call, copies, args):
    """Median host wall ms per call of a call that waits for the GPU itself (a checked
    call), over the budget: each call timed alone."""
    call(0)
    torch.cuda.synchronize()
    times, spent, i = [], 0.0, 0
    while (len(times) < 10 or spent < args.budget_ms) and len(times) < 1000:
        start = time.perf_counter()
        call(i % copies)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        spent += times[-1]
        i += 1
        if spent > 4 * args.budget_ms and len(times) >= 3:
            break
    return statistics.median(times)


def copy_bandwidth(nbytes=2 << 30):
    """Device-to-device copy bandwidth in TB/s: clone of an nbytes tensor, bytes read plus
    bytes written over its GPU time."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    src.clone()
    _, estimate = timing.timed_once(src.clone)
    times, _, _ = timing.time_calls(lambda i: src.clone(), 1, timing.Budget(300, 10, 100, 3000),
                                    estimate)
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e12


# The implementations ----------------------------------------------------------------------

def flashattn_call(step, caches, checked, num_splits=0):
    """call(i): one decode step on cache copy i (num_splits 0: the library's choice)."""
    def call(i):
        k_cache, v_cache, table = caches[i]
        return flashattn.attention_with_kvcache(step.q, k_cache, v_cache, step.k_new,
                                                step.v_new, step.cache_seqlens, table,
                                                causal=True, checked=checked,
                                                num_splits=num_splits)
    return call


def captured(call, copies):
    """A CUDA graph of call(i) for each copy, and the outputs the replays write."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(copies):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    graphs, outs = [], []
    for i in range(copies):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs.append(call(i))
        graphs.append(graph)
    return graphs, outs


def sdpa_candidates(config, step, caches):
    """{name: call(i)} of PyTorch's SDPA on the contiguous caches' first L keys, returning
    (B, seqlen_q, Hq, d). seqlen_q 1: each backend through sdpa_kernel, no mask; above:
    causal_lower_right (flash where it can run) and an explicit boolean mask on each other
    backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    q = step.q.transpose(1, 2)
    length, seqlen_q = config.length, config.seqlen_q
    group = config.heads_q // config.heads_kv

    def kv(i):
        k_cache, v_cache, _ = caches[i]
        return k_cache[:, :length].transpose(1, 2), v_cache[:, :length].transpose(1, 2)

    def with_backend(backend, mask):
        def call(i):
            k, v = kv(i)
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                     enable_gqa=group > 1)
            return out.transpose(1, 2)
        return call
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    element = torch.finfo(DTYPES[config.dtype]).bits // 8
    math_bytes = (config.kv_bytes_read() * group * (4 // element) +
                  2 * config.batch * config.heads_q * seqlen_q * length * 4)
    if math_bytes > MATH_LIMIT_BYTES:
        del backends["math"]
    if seqlen_q == 1:
        return {name: with_backend(backend, None) for name, backend in backends.items()}
    bias = causal_lower_right(seqlen_q, length)

    def lower_right(i):
        k, v = kv(i)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                              enable_gqa=group > 1).transpose(1, 2)
    rows = torch.arange(seqlen_q, device="cuda")[:, None]
    mask = torch.arange(length, device="cuda")[None, :] <= rows + (length - seqlen_q)
    calls = {"causal_lower_right": lower_right}
    calls.update({f"{name} (bool mask)": with_backend(backend, mask)
                  for name, backend in backends.items() if name != "flash"})
    return calls


def with_append(config, step, caches, attend):
    """call(i): PyTorch doing a flashattn step's whole work on contiguous cache copy i: the
    step's new keys and values written at rows L - seqlen_q .. L - 1 of every sequence (the
    rows flashattn appends to), then attend(i), an SDPA call over the first L keys."""
    first, end = config.length - config.seqlen_q, config.length

    def call(i):
        k_cache, v_cache, _ = caches[i]
        k_cache[:, first:end] = step.k_new
        v_cache[:, first:end] = step.v_new
        return attend(i)
    return call


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-30)).item()


# One config -------------------------------------------------------------------------------

def warn(message):
    print(f"  WARNING: {message}", flush=True)


def run_config(config, args, copy_tb_s):
    """The rows of one config: PyTorch's SDPA once on the contiguous cache, then flashattn on
    each layout."""
    seed = args.seed
    step = make_step(config, seed + 1, args.append)
    rows, sdpa_best, sdpa_append_us, contiguous_us, reference = [], None, None, None, None
    layouts = (None,) + tuple(page for page in config.layouts if page is not None)
    for page_size in layouts:
        copies = timing.copies_needed(config.cache_bytes(page_size))
        caches = cache_copies(config, page_size, seed, copies)
        unchecked = flashattn_call(step, caches, checked=False)
        for i in range(copies):  # the step's keys appended in every copy before SDPA reads
            unchecked(i)
        torch.cuda.synchronize()
        if page_size is None:
            sdpa_best, reference, attend = time_sdpa(config, step, caches, copies, args)
            if attend is not None and step.k_new is not None:
                append_ms, _ = gpu_time(with_append(config, step, caches, attend), copies, args)
                sdpa_append_us = append_ms * 1e3
        row = dict(point=config.name, layout=layout_name(page_size), **dataclasses.asdict(config),
                   page_size=page_size, appended=args.append, copies=copies)
        row.pop("layouts")
        us, host_ms = gpu_time(unchecked, copies, args)
        us *= 1e3
        row.update(flashattn_us=us, host_us=host_ms * 1e3 if host_ms is not None else None)
        row["checked_us"] = wall_time(flashattn_call(step, caches, checked=True), copies,
                                      args) * 1e3
        graphs, graph_outs = captured(unchecked, copies)
        graph_us, _ = gpu_time(lambda i: graphs[i].replay(), copies, args)
        row["graph_us"] = graph_us * 1e3
        eager = unchecked(0)
        graphs[0].replay()
        torch.cuda.synchronize()
        row["graph_equals_eager"] = bool(torch.equal(graph_outs[0], eager))
        if not row["graph_equals_eager"]:
            warn(f"{config.name} {layout_name(page_size)}: the CUDA graph's replay differs from "
                 f"the eager call (max |diff| "
                 f"{(graph_outs[0].float() - eager.float()).abs().max().item():.3g})")
        kv_bytes = config.kv_bytes_read()
        row.update(kv_gb=kv_bytes / 1e9, tb_s=kv_bytes / (us * 1e-6) / 1e12)
        row["of_copy"] = row["tb_s"] / copy_tb_s
        row["graph_over_eager"] = row["graph_us"] / us
        if sdpa_best is not None:
            # speedup: over PyTorch doing the step's whole work (its append too, where the
            # step appends); speedup_attention_alone: over the SDPA call alone.
            backend, sdpa_us = sdpa_best
            row.update(sdpa_backend=backend, sdpa_us=sdpa_us, sdpa_append_us=sdpa_append_us,
                       speedup_attention_alone=sdpa_us / us)
            row["speedup"] = decode_report.same_work_us(row) / us
        if page_size is None:
            contiguous_us = us
        else:
            row["paged_over_contiguous"] = us / contiguous_us
        if reference is not None:
            row["rel_l2"] = rel_l2(eager, reference)
            if not row["rel_l2"] <= TOLERANCE[config.dtype]:
                warn(f"{config.name} {layout_name(page_size)}: relative L2 {row['rel_l2']:.3g} "
                     f"against PyTorch's output, above {TOLERANCE[config.dtype]:g}")
        rows.append(row)
        print("  " + decode_report.format_row(row), flush=True)
        graphs = graph_outs = caches = eager = None  # the memory back
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rows


def out_of_memory(config, error):
    """Warns that `config` ran out of memory and hands the cached memory back; returns why."""
    why = f"out of memory ({str(error).splitlines()[0][:100]})"
    warn(f"{config.name}: {why}")
    torch.cuda.empty_cache()
    return why


def time_sdpa(config, step, caches, copies, args):
    """((backend, µs) of the fastest SDPA candidate that runs, its output, its call) or
    (None, None, None)."""
    best, reference, first, fastest = None, None, None, None
    for name, call in sdpa_candidates(config, step, caches).items():
        try:
            out = call(0)
            torch.cuda.synchronize()
            ms, _ = gpu_time(call, copies, args)
        except (RuntimeError, ValueError, NotImplementedError) as error:
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            print(f"    sdpa {name}: {type(error).__name__}: {message[:110]}", flush=True)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            continue
        agreement = ""
        if first is None:
            first = (name, out)
        else:  # the backends should agree with each other as well as with flashattn
            error = rel_l2(out, first[1])
            agreement = f" (rel L2 {error:.1e} against sdpa {first[0]})"
            if not error <= TOLERANCE[config.dtype]:
                warn(f"{config.name}: sdpa {name} and sdpa {first[0]} differ: relative L2 "
                     f"{error:.3g}")
        print(f"    sdpa {name}: {ms * 1e3:.1f} us{agreement}", flush=True)
        if best is None or ms * 1e3 < best[1]:
            best, reference, fastest = (name, ms * 1e3), out, call
    if best is None:
        warn(f"{config.name}: no SDPA backend runs it")
    return best, reference, fastest


# Report -----------------------------------------------------------------------------------

def markdown(rows, header, skipped):
    lines = header + [""] + decode_report.table_lines(rows)
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{c.name} {layout_name(p)} ({why})"
                                             for c, p, why in skipped) + "."]
    lines += ["", decode_report.NOTE]
    return "\n".join(lines) + "\n"


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse_args(argv=None):
    first, _, rest = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(description=first,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=rest)
    parser.add_argument("--out", help="markdown table to write (and its .jsonl beside it)")
    parser.add_argument("--full", action="store_true", help="every combination, not the "
                        "default ~40 rows")
    parser.add_argument("--match", help="only rows whose 'point layout' matches this regex, "
                        "e.g. 'B32 L32k' or 'paged'")
    parser.add_argument("--max-gb", type=float, default=MAX_GB,
                        help=f"skip caches (k and v) larger than this many GB (default {MAX_GB:g})")
    parser.add_argument("--budget-ms", type=float, default=30.0,
                        help="timed GPU ms per measurement (default 30)")
    parser.add_argument("--no-append", dest="append", action="store_false",
                        help="append nothing: all L keys cached before the step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="list the rows; no GPU needed")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    configs, skipped = selected(full_grid() if args.full else default_grid(), args.match,
                                args.max_gb)
    if args.dry_run:
        n = 0
        for config in configs:
            for page in config.layouts:
                n += 1
                print(f"{n:4d}  {config.name:<34} {layout_name(page):<11} cache "
                      f"{config.cache_bytes(page) / 1e9:7.3f} GB")
        for config, page, why in skipped:
            print(f"skip  {config.name:<34} {layout_name(page):<11} {why}")
        print(f"{n} rows in {len(configs)} configs, {len(skipped)} skipped")
        return
    if not torch.cuda.is_available():
        sys.exit("bench/decode.py needs a CUDA GPU (--dry-run lists the grid without one)")
    out_md = Path(args.out) if args.out else None
    out_jsonl = out_md.with_suffix(".jsonl") if out_md else None
    copy_tb_s = copy_bandwidth()
    header = [f"# Decode over a KV cache, {torch.cuda.get_device_name()}",
              "",
              f"flashattn {commit()}, torch {torch.__version__}, "
              f"{datetime.date.today().isoformat()}; copy bandwidth {copy_tb_s:.2f} TB/s "
              f"(clone of 2 GiB, read + write); causal bottom-right; "
              f"{'seqlen_q keys appended per step' if args.append else 'nothing appended'}; "
              f"grid {'full' if args.full else 'default'}"
              f"{f', --match {args.match!r}' if args.match else ''}."]
    print("\n".join(header), flush=True)
    started = time.perf_counter()
    rows = []
    if out_jsonl:
        out_jsonl.write_text("")
    for index, config in enumerate(configs):
        print(f"[{index + 1}/{len(configs)}] {config.name}", flush=True)
        try:
            new_rows = run_config(config, args, copy_tb_s)
        except torch.cuda.OutOfMemoryError as error:
            out_of_memory(config, error)
            continue
        rows += new_rows
        if out_md:
            with out_jsonl.open("a") as f:
                for row in new_rows:
                    f.write(json.dumps(dict(row, device=torch.cuda.get_device_name(),
                                            copy_tb_s=copy_tb_s)) + "\n")
            out_md.write_text(markdown(rows, header, skipped))
    print(f"\n{len(rows)} rows in {time.perf_counter() - started:.0f} s")
    if out_md:
        print(f"wrote {out_md} and {out_jsonl}")
    else:
        print(markdown(rows, header, skipped))


if __name__ == "__main__":
    main()
