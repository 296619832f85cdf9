"""The CPU grid of bench/run (--grids cpu): flashattn's `cpu` backend against PyTorch's CPU
scaled_dot_product_attention, fp32, timed by wall clock in this one process on the same
inputs, forward and backward.

Points: seqlen 128 to 8192 at head dims 64 and 128, causal and not (batch × seqlen = 4096
tokens where seqlen allows, 8 heads); the four shapes of the issue's table; decode shapes
(1 to 4 query rows against 4k to 32k cached keys, grouped kv heads among them); the backward
on seqlen 512 to 4096 and the table's shapes; the variants (score_variants.py), forward and
backward, at shapes whose plain point is in the grid: a causal sliding window (512, 0) on
4096 tokens, softcap 30 and ALiBi at 1024. PyTorch runs each point on every SDPA backend
that takes it on the CPU (flash and math) and the fastest counts; a variant reaches it as an
additive attn_mask, and softcap, which has no SDPA form, has no PyTorch time. The ceilings: the vector
units' fp32 multiply-add rate on all threads, measured by flashattn-cpu-peak (tools/cpu_peak,
found beside the library or at $FLASHATTN_CPU_PEAK), for the instruction set the backend runs;
the fp32 matrix rate of torch.mm at 4096³; and the copy bandwidth. Each run writes its JSON and
Markdown and adds a line to history.jsonl (report.history_line, kind "cpu grid").

Timing: flashattn's call and each PyTorch backend's are timed in turn, ROUNDS times, each
call's best round kept (timed() per turn: the median of its repetitions), so that a phase
of the machine (the lent VMs' vector rate was seen to halve between two processes of one
lease) reaches both sides alike. A PyTorch backend over 1.5× the fastest of them after the
first round cannot be the fastest and drops out.

A/B of CPU kernel versions (bench/run --grids cpu --builds NAME=PATH): each point also runs
on every other build's `cpu` backend, in the same turns, all through the same op
(_torch_op.run and run_backward, lib= each build's library), so drift during a point
reaches every build alike; the report gives this build's speed-up over each per point and
their geometric mean. Both libraries' thread pools live in the process; an idle pool sleeps.
"""
import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _library, _torch_op
import grid
import implementations
import report
import score_variants

TORCH_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}
SEQLENS = (128, 512, 1024, 2048, 4096, 8192)
TABLE = ((1, 1024, 8, 64, False), (1, 2048, 16, 64, True), (1, 4096, 8, 128, True),
         (4, 512, 12, 64, False))
# (batch, query rows, cached keys, q heads, kv heads, head_dim)
DECODE = ((1, 1, 8192, 32, 32, 128), (1, 1, 32768, 32, 8, 128), (8, 1, 4096, 32, 8, 128),
          (1, 4, 16384, 8, 8, 64), (16, 1, 4096, 16, 16, 64))
BWD_SEQLENS = (512, 1024, 2048, 4096)
# (seqlen, causal, variant): each beside the plain point of its shape (8 heads, head_dim 64).
VARIANTS = ((4096, True, dict(window=(512, 0))), (1024, False, dict(softcap=30.0)),
            (1024, True, dict(alibi=True)))


def points(quick=False):
    pts = []
    seqlens = (512, 2048) if quick else SEQLENS
    for n in seqlens:
        for d in (64, 128):
            for causal in (False, True):
                pts.append(dict(pass_="fwd", batch=max(1, 4096 // n), nq=n, nk=n, hq=8, hkv=8,
                                d=d, causal=causal))
    for b, n, h, d, causal in TABLE:
        pts.append(dict(pass_="fwd", batch=b, nq=n, nk=n, hq=h, hkv=h, d=d, causal=causal))
        pts.append(dict(pass_="bwd", batch=b, nq=n, nk=n, hq=h, hkv=h, d=d, causal=causal))
    for b, nq, nk, hq, hkv, d in (DECODE[:2] if quick else DECODE):
        pts.append(dict(pass_="fwd", batch=b, nq=nq, nk=nk, hq=hq, hkv=hkv, d=d, causal=False))
    for n in ((1024,) if quick else BWD_SEQLENS):
        for d in (64, 128):
            for causal in (False, True):
                pts.append(dict(pass_="bwd", batch=max(1, 4096 // n), nq=n, nk=n, hq=8, hkv=8,
                                d=d, causal=causal))
    for pass_ in ("fwd", "bwd"):
        for n, causal, variant in VARIANTS[:1] if quick else VARIANTS:
            pts.append(dict(pass_=pass_, batch=4096 // n, nq=n, nk=n, hq=8, hkv=8, d=64,
                            causal=causal, **variant))
    return pts


def as_point(p):
    """The grid.Point of a square point, for its FLOPs and variant label."""
    return grid.Point("cpu", "f32", p["batch"], p["nq"], p["hq"], p["d"],
                      "top_left" if p["causal"] else "none", pass_=p["pass_"],
                      window=p.get("window"), softcap=p.get("softcap", 0.0),
                      alibi=p.get("alibi", False))


def label(p):
    mask = " causal" if p["causal"] else ""
    heads = f"H{p['hq']}" + (f"/{p['hkv']}" if p["hkv"] != p["hq"] else "")
    variant = as_point(p).variant_label()
    return (f"{p['pass_']} B{p['batch']} Nq{p['nq']} Nk{p['nk']} {heads} d{p['d']}{mask}" +
            (f" {variant}" if variant else ""))


def flops(p):
    """4·B·H·Nq·Nk·d, halved for causal (square problems), 2.5× for the backward; with a
    window, 4·B·H·d times the (row, key) pairs it leaves visible (grid.Point.flops)."""
    if p.get("window"):
        return as_point(p).flops()
    f = 4 * p["batch"] * p["hq"] * p["nq"] * p["nk"] * p["d"]
    f = f / 2 if p["causal"] else f
    return f * (2.5 if p["pass_"] == "bwd" else 1.0)


ROUNDS = 3  # turns of each call (this build, other builds, PyTorch's backends) per point
THIS_BUILD = "@this"  # this build's name among the A/B builds (theirs have no "@")
TORCH = "torch:"  # prefix of PyTorch's backends among a point's calls


def timed(fn, budget_s=0.6, min_reps=3, max_reps=20):
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or (len(times) < max_reps and time.perf_counter() - start < budget_s):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def vector_peak(threads, isa, runs=3):
    """GFLOP/s of flashattn-cpu-peak's line for `isa` on `threads` threads, the best of
    `runs` runs (a lent VM's rate was seen to halve from one run to the next), or None."""
    lib = Path(os.environ.get("FLASHATTN_LIBRARY", "build/libflashattn.so")).resolve().parent
    exe = Path(os.environ.get("FLASHATTN_CPU_PEAK", lib / "tools/cpu_peak/flashattn-cpu-peak"))
    if not exe.exists():
        return None
    peaks = {}
    for _ in range(runs):
        out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.match(r"(\w+) 1 thread ([\d.]+) GFLOP/s, \d+ threads ([\d.]+)", line)
            if m:
                peaks[m.group(1)] = max(peaks.get(m.group(1), 0.0), float(m.group(3)))
    return peaks.get(isa, max(peaks.values()) if peaks else None)


def interleaved(calls, rounds=ROUNDS):
    """{name: seconds} for {name: fn}: the calls timed in turn, `rounds` times, each one's
    best round kept. After the first round, PyTorch's backends (names starting with TORCH)
    over 1.5× the fastest of them drop out: they cannot become the fastest."""
    best = {}
    for turn in range(rounds):
        for name, fn in calls.items():
            t = timed(fn)
            best[name] = min(best.get(name, t), t)
        if turn == 0:
            theirs = [t for name, t in best.items() if name.startswith(TORCH)]
            calls = {name: fn for name, fn in calls.items()
                     if not name.startswith(TORCH) or best[name] <= 1.5 * min(theirs)}
    return best


def build_calls(libs, q, k, v, causal, variants, backward=None):
    """{name: fn} running the `cpu` backend of each library in `libs` ({name: loaded
    library}) on one point, all through the package's op with lib= (so this build's and
    the others' calls take the same path); backward: (out, dout, lse) of this build's
    forward, to time the backward instead."""
    (window_left, window_right), options = variants.window, dict(
        softcap=variants.softcap, alibi_slopes=variants.alibi_slopes,
        attn_mask=variants.attn_mask)
    common = dict(window_left=window_left, window_right=window_right, **options)

    def forward(lib):
        return lambda: _torch_op.run(q, k, v, causal, "top_left", None, "cpu", False, lib=lib,
                                     **common)

    def gradients(lib):
        out, dout, lse = backward
        return lambda: _torch_op.run_backward(dout, q, k, v, out, lse, causal, "top_left",
                                              None, "cpu", False, lib=lib, **common)
    make = forward if backward is None else gradients
    return {name: make(lib) for name, lib in libs.items()}


def our_calls(builds, alone, q, k, v, causal, variants, backward=None):
    """This build's call on a point (`alone`), or, with builds ({name: loaded library}), this
    build's and theirs through one op (build_calls), named by build."""
    if not builds:
        return {THIS_BUILD: alone}
    libs = dict({THIS_BUILD: _library.library()}, **builds)
    return build_calls(libs, q, k, v, causal, variants, backward)


def ceilings():
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    mm = min(timed(lambda: torch.mm(a, b), budget_s=1.0) for _ in range(2))
    src = torch.randn(256 * 2**20 // 4)
    dst = torch.empty_like(src)
    copy = timed(lambda: dst.copy_(src), budget_s=1.0)
    return {"f32_matmul_gflops": 2 * 4096**3 / mm / 1e9,
            "copy_gb_per_s": 2 * src.numel() * 4 / copy / 1e9}


def inputs(p):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(p["batch"], p["nq"], p["hq"], p["d"], generator=g)
    k = torch.randn(p["batch"], p["nk"], p["hkv"], p["d"], generator=g)
    v = torch.randn(p["batch"], p["nk"], p["hkv"], p["d"], generator=g)
    return q, k, v


def measure_point(p, builds=None):
    """The point's row; builds ({name: loaded library}): other builds timed beside this one
    (A/B mode), their times in row["builds_ms"]."""
    q, k, v = inputs(p)
    causal = p["causal"]
    gqa = p["hkv"] != p["hq"]
    variants = score_variants.of_point(as_point(p), "cpu")
    ours_options = dict(causal=causal, backend="cpu", **variants.keywords())
    # PyTorch's: the variants as one additive mask (which holds the causal mask too); none
    # for softcap, which SDPA cannot express.
    mask = (score_variants.sdpa_mask(p["nq"], causal, variants, q.dtype, "cpu")
            if variants.any() and not variants.softcap else None)
    torch_options = dict(attn_mask=mask, is_causal=causal and mask is None, enable_gqa=gqa)
    torch_backends = {} if variants.softcap else TORCH_BACKENDS
    # PyTorch's layout (batch, heads, seqlen, head_dim), as views of the same tensors.
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    row = dict(p, label=label(p), gflop=flops(p) / 1e9)
    theirs = {}  # PyTorch's calls that run this point, by backend
    if p["pass_"] == "fwd":
        ours = our_calls(builds, lambda: flashattn.attention(q, k, v, **ours_options),
                         q, k, v, causal, variants)
        for name, backend in torch_backends.items():
            def call(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, **torch_options)
            try:
                call()
                theirs[name] = call
            except RuntimeError:
                pass
    else:
        out, lse = flashattn.attention(q, k, v, return_lse=True, **ours_options)
        dout = torch.randn_like(out)
        ours = our_calls(builds, lambda: flashattn.attention_backward(
            q, k, v, out, dout, lse, **ours_options), q, k, v, causal, variants,
            (out, dout, lse))
        for name, backend in torch_backends.items():
            try:
                # The graph is built under the backend, which its backward then runs.
                leaves = [x.detach().requires_grad_() for x in (qt, kt, vt)]
                with sdpa_kernel(backend), torch.enable_grad():
                    o = F.scaled_dot_product_attention(*leaves, **torch_options)
                theirs[name] = lambda o=o, leaves=leaves: torch.autograd.grad(
                    o, leaves, dout.transpose(1, 2), retain_graph=True)
            except RuntimeError:
                pass
    times = interleaved(dict(ours, **{TORCH + name: fn for name, fn in theirs.items()}))
    theirs = {name[len(TORCH):]: t for name, t in times.items() if name.startswith(TORCH)}
    ours = times.pop(THIS_BUILD)
    if builds:
        row["builds_ms"] = {name: times[name] * 1e3 for name in builds}
    row["ms"] = ours * 1e3
    row["gflops"] = flops(p) / ours / 1e9
    row["torch_ms"] = {name: t * 1e3 for name, t in theirs.items()}
    best = min(theirs, key=theirs.get, default=None)
    row["torch_best"] = best
    row["torch_gflops"] = flops(p) / theirs[best] / 1e9 if best else None
    row["ratio"] = theirs[best] / ours if best else None
    if p["nq"] < 8:  # decode: bytes of K and V read once
        kv_bytes = 2 * k.numel() * 4
        row["kv_gb_per_s"] = kv_bytes / ours / 1e9
    return row


def flashattn_isa():
    """The widest set the CPU runs, as the backend picks it (cpu/isa.h)."""
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    if all(f" {x}" in flags for x in ("avx512f", "avx512bw", "avx512dq", "avx512vl")):
        return "avx512"
    if all(f" {x}" in flags for x in ("avx2", "fma", "f16c")):
        return "avx2"
    return "baseline"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def markdown(results):
    c = results["ceilings"]
    builds = results.get("builds", {})
    lines = [f"# CPU grid: {results['cpu']}, commit {results['commit']}", "",
             f"{results['threads']} flashattn threads, {results['torch_threads']} PyTorch "
             f"threads, flashattn's vector set {results['isa']}. Ceilings: vector fp32 "
             f"multiply-add peak {c.get('vector_peak_gflops') or float('nan'):.0f} GFLOP/s "
             f"(measured), fp32 torch.mm 4096³ {c['f32_matmul_gflops']:.0f} GFLOP/s, copy "
             f"{c['copy_gb_per_s']:.1f} GB/s (read + write).", "",
             "| point | flashattn ms | GFLOP/s | of peak | PyTorch best | its GFLOP/s | ratio |"
             + "".join(f" {name} ms | vs {name} |" for name in builds),
             "|---|---|---|---|---|---|---|" + "---|---|" * len(builds)]
    peak = c.get("vector_peak_gflops") or c["f32_matmul_gflops"]
    for r in results["rows"]:
        theirs = ("none (no SDPA form)", "", "") if r["torch_best"] is None else (
            f"{r['torch_best']} {r['torch_ms'][r['torch_best']]:.3f} ms",
            f"{r['torch_gflops']:.0f}", f"{r['ratio']:.2f}×")
        other = "".join(f" {r['builds_ms'][name]:.3f} | {r['builds_ms'][name] / r['ms']:.3f}× |"
                        for name in builds)
        lines.append(f"| {r['label']} | {r['ms']:.3f} | {r['gflops']:.0f} | "
                     f"{r['gflops'] / peak:.0%} | " + " | ".join(theirs) + " |" + other)
    ratios = [r["ratio"] for r in results["rows"] if r["ratio"] is not None]
    lines += ["", f"Ratio (PyTorch's fastest time / flashattn's): min {min(ratios):.2f}×, "
              f"geometric mean {statistics.geometric_mean(ratios):.2f}× over {len(ratios)} points."]
    for name, path in builds.items():
        speedups = [r["builds_ms"][name] / r["ms"] for r in results["rows"]]
        lines.append(f"This build over {name} ({path}), interleaved, best of {ROUNDS} "
                     f"rounds: min {min(speedups):.3f}×, geometric mean "
                     f"{statistics.geometric_mean(speedups):.3f}× over {len(speedups)} points.")
    return "\n".join(lines) + "\n"


def chosen(quick=False, match=None):
    """The grid's points whose label matches `match` (all where None)."""
    return [p for p in points(quick) if not match or re.search(match, label(p))]


def dry_run(quick=False, match=None):
    """Lists the points bench/run would time, without timing any."""
    pts = chosen(quick, match)
    print(f"cpu: {len(pts)} points")
    for p in pts:
        print(f"  {label(p):<52} {flops(p) / 1e9:12.4g} GFLOP")


def run(out_dir, commit, quick=False, match=None, builds=None):
    """Measures the grid and writes its files; builds: bench/run's --builds text (A/B)."""
    isa = os.environ.get("FLASHATTN_CPU_ISA") or flashattn_isa()
    paths = implementations.parse_builds(builds) if builds else {}
    libs = {name: _library.load(path) for name, path in paths.items()}
    results = {"cpu": cpu_name(), "commit": commit, "isa": isa, "threads": os.cpu_count(),
               "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
               "torch_threads": torch.get_num_threads(), "builds": paths, "rows": []}
    if hasattr(os, "sched_getaffinity"):
        results["threads"] = len(os.sched_getaffinity(0))
    if os.environ.get("FLASHATTN_NUM_THREADS"):
        results["threads"] = int(os.environ["FLASHATTN_NUM_THREADS"])
    print(f"{results['cpu']}: measuring the ceilings", flush=True)
    results["ceilings"] = ceilings()
    results["ceilings"]["vector_peak_gflops"] = vector_peak(results["threads"], isa)
    print(f"  fp32 mm {results['ceilings']['f32_matmul_gflops']:.0f} GFLOP/s, copy "
          f"{results['ceilings']['copy_gb_per_s']:.1f} GB/s, vector peak "
          f"{results['ceilings']['vector_peak_gflops']} GFLOP/s", flush=True)
    for p in chosen(quick, match):
        row = measure_point(p, libs)
        results["rows"].append(row)
        theirs = (f"PyTorch {row['torch_best']} {row['torch_gflops']:7.1f}  ratio "
                  f"{row['ratio']:.2f}" if row["torch_best"] else "PyTorch: no SDPA form")
        other = "".join(f"  vs {name} {ms / row['ms']:.3f}"
                        for name, ms in row.get("builds_ms", {}).items())
        print(f"  {row['label']:<40} {row['gflops']:7.1f} GFLOP/s  {theirs}{other}", flush=True)
    slug = re.sub(r"\W+", "-", results["cpu"]).strip("-").lower()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report.free_stem(out_dir, f"cpu-{slug}-{time.strftime('%Y-%m-%d')}-{commit}")
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1))
    (out_dir / f"{stem}.md").write_text(markdown(results))
    report.append_history(results, f"{stem}.json", out_dir / report.HISTORY)
    print(f"wrote {out_dir / stem}.json and .md")
