#!/usr/bin/env python3
"""Tables and plots from one bench/run JSON: `bench/report.py RESULTS.json [--no-plots]`.

Writes RESULTS.md beside the JSON (the tables, each flashattn backend's speed ratio against
the best alternative at every point, accuracy, what did not run) and, with matplotlib,
RESULTS-paper-<dtype>.png, RESULTS-exercise.png, RESULTS-memory.png and the backward grids'
RESULTS-<grid>-<pass>[-<dtype>].png. Needs no GPU.

The runs over time: bench/run appends one line per run to bench/results/history.jsonl
(history_line: date, commit, device, grids, rounds, timing, ceilings, and "ratios", each
"OURS/ALT GRID" as [geometric mean, min, max, points, points ≥ 1] of alternative time over
ours; the decode and varlen grids' ratios, such as "flashattn/best decode", in the same
form). `bench/report.py --history bench/results/history.jsonl` prints the headline ratios by
run and, with matplotlib, draws them (history.png); `--rebuild-history FILE` rewrites the
file from every results JSON that git has recorded.
"""
import argparse
import json
import math
import subprocess
from collections import defaultdict
from pathlib import Path

import decode_report
import models_report
import variants_report
import varlen_report
from result_rows import (FLASHATTN, PASS_NAMES, SPEED_GRIDS, best_alternative,  # noqa: F401
                         by_point, exercise_shape, family_of, geomean, grouped, head_dim_v_of,
                         head_dims_of, heads_of, impl_order, model_of, pass_of, ratio_summary,
                         run_label, scope, sig, status_mark, table, timed, variant_of)

MIB = 2**20


# ---- reading rows -------------------------------------------------------------------------

ROW_KEY = ("impl", "grid", "dtype", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
           "head_dim", "causal")


def row_key(row):
    return tuple(row[k] for k in ROW_KEY) + (pass_of(row), variant_of(row), model_of(row),
                                             head_dim_v_of(row))


def merge_rounds(rows):
    """One row per point and implementation from rounds of the same grid: the round whose
    median time is the median of the rounds' (its spread and accuracy with it), and
    "round_ms", every round's median in order. A point with one round keeps its row."""
    groups = {}
    for row in rows:
        groups.setdefault(row_key(row), []).append(row)
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        timed = [r for r in group if r["status"] == "ok" and r["ms"] is not None]
        if not timed:
            merged.append(group[0])
            continue
        middle = dict(sorted(timed, key=lambda r: r["ms"])[(len(timed) - 1) // 2])
        middle["round_ms"] = [r["ms"] for r in timed]
        merged.append(middle)
    return merged


# ---- formatting ---------------------------------------------------------------------------

def cell(row, value):
    return sig(value(row)) if timed(row) else status_mark(row)


def ratio(best, row):
    return f"{sig(best['ms'] / row['ms'], 2)}×" if best and timed(row) else ""


# ---- sections -----------------------------------------------------------------------------

def speed_table(results, grid, dtype, shape_cells, shape_header, value, unit, pass_="fwd"):
    """One row per point: each implementation's `value`, the best alternative, and each
    flashattn backend's speed ratio to it (its time over ours: above 1 means ours is
    faster) and its fraction of the ceiling."""
    rows = [r for r in results["rows"]
            if r["grid"] == grid and r["dtype"] == dtype and pass_of(r) == pass_]
    if not rows:
        return ""
    impls = [n for n in impl_order(results, rows)
             if any(timed(r) for r in rows if r["impl"] == n)]
    absent = [n for n in impl_order(results, rows) if n not in impls]
    ours = [n for n in impls if family_of(results, n) == FLASHATTN]
    header = shape_header + [f"{n} ({unit})" for n in impls] + ["best alternative"]
    header += [h for n in ours for h in (f"{n} vs best", f"{n} % of ceiling")]
    body = []
    for key, impl_rows in by_point(rows, grid).items():
        best = best_alternative(impl_rows)
        line = shape_cells(next(iter(impl_rows.values())))
        line += [cell(impl_rows.get(n), value) for n in impls]
        line.append(best["impl"] if best else "")
        for n in ours:
            r = impl_rows.get(n)
            line.append(ratio(best, r))
            line.append(f"{sig(100 * r['fraction_of_ceiling'], 2)}%" if timed(r) else "")
        body.append(line)
    note = f"\n\nNot run at any point here: {', '.join(absent)} (see *Not run*)." if absent else ""
    return table(header, body) + note


def paper_shape(row):
    return [str(row["head_dim"]), "causal" if row["causal"] != "none" else "",
            str(row["seqlen_q"]), f"{row['batch']}×{heads_of(row)}"]


def memory_table(results):
    rows = [r for r in results["rows"] if r["grid"] == "memory"]
    if not rows:
        return ""
    impls = impl_order(results, rows)
    seqlens = sorted({r["seqlen_q"] for r in rows})
    found = {(r["impl"], r["seqlen_q"]): r for r in rows}
    body = []
    for n in seqlens:
        line = [str(n)]
        for impl in impls:
            r = found.get((impl, n))
            ok = r is not None and r["status"] == "ok"
            line.append(sig(r["peak_extra_bytes"] / MIB) if ok else status_mark(r))
        body.append(line)
    return table(["seqlen"] + [f"{n} (MiB)" for n in impls], body)


def accuracy_table(results):
    """Worst and median relative L2 error of each implementation per grid and dtype. Rows
    with no reference (dropout: each library drops its own elements) are counted apart,
    not as NaN/inf."""
    errors, unchecked = defaultdict(list), defaultdict(int)
    for r in results["rows"]:
        if r["status"] != "ok":
            continue
        key = (r["impl"], r["grid"], r["dtype"])
        if r.get("rel_l2_err") is None and r.get("note", "").startswith("dropout"):
            unchecked[key] += 1
        else:
            errors[key].append(r.get("rel_l2_err"))
    body = []
    for impl in impl_order(results, results["rows"]):
        for name, grid, dtype in sorted(set(errors) | set(unchecked)):
            if name != impl:
                continue
            errs = errors[(name, grid, dtype)]
            finite = sorted(e for e in errs if e is not None)
            bad = len(errs) - len(finite)
            worst = f"{finite[-1]:.1e}" if finite else ""
            median = f"{finite[len(finite) // 2]:.1e}" if finite else ""
            skipped = unchecked[(name, grid, dtype)]
            body.append([impl, grid, dtype, str(len(errs)), median, worst, str(bad) if bad else "",
                         str(skipped) if skipped else ""])
    return table(["impl", "grid", "dtype", "points", "median rel L2 err", "worst", "NaN/inf",
                  "no reference"], body)


def host_table(results):
    """Median host time to issue one call, per implementation, over its timed points: where
    it exceeds the GPU time, a caller that waits on each call is bound by it."""
    host = defaultdict(list)
    for r in results["rows"]:
        if timed(r) and r.get("host_ms") is not None:
            host[r["impl"]].append(r["host_ms"])
    body = [[impl, str(len(host[impl])), f"{1000 * sorted(host[impl])[len(host[impl]) // 2]:.0f}"]
            for impl in impl_order(results, results["rows"]) if host.get(impl)]
    if not body:
        return ""
    late = [r for r in results["rows"] if r.get("queued_ahead") is False]
    note = (f"\n\n{len(late)} row(s) could not be queued ahead of the GPU; their times include "
            f"host time: " + ", ".join(f"{r['impl']} N{r['seqlen_q']}" for r in late[:10])
            if late else "")
    return table(["impl", "points", "median host µs per call"], body) + note


def not_run(results):
    """One line per (implementation, status): how many points, and the first reason."""
    seen = defaultdict(list)
    for r in results["rows"]:
        if r["status"] != "ok":
            seen[(r["impl"], r["status"])].append(r)
    lines = []
    for (impl, status), rows in seen.items():
        grids = sorted({r["grid"] for r in rows})
        lines.append(f"- `{impl}` {status} at {len(rows)} point(s) ({', '.join(grids)}): "
                     f"{rows[0].get('note', '')}")
    return "\n".join(lines)


# ---- the document -------------------------------------------------------------------------

def subset_note(results):
    """Where the run kept only the points matching --match: which, for the report's first line."""
    match = results.get("match")
    return f" of the points matching `{match}` (--match)" if match else ""


def preamble(results):
    c, env = results["ceilings"], results.get("environment", {})
    return "\n".join([
        f"# Attention: {results['device']}",
        "",
        f"Commit `{results['commit']}`, {results['date']}, {results.get('mode', 'full')} run"
        f"{subset_note(results)}; "
        f"torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
        f"driver {env.get('driver')}.",
        "",
        f"Ceilings measured in the same run: bf16 matrix product (8192³) "
        f"**{c['bf16_matmul_tflops']:.0f} TFLOP/s**, fp32 matrix product (no TF32) "
        f"**{c['f32_matmul_tflops']:.1f} TFLOP/s**, device-to-device copy "
        f"**{c['copy_tb_per_s']:.2f} TB/s** (read + write).",
        "",
        "Times are medians of repeated calls timed with CUDA events after warm-up, on fresh "
        "random inputs rotated among copies when they would fit in L2. TFLOP/s counts "
        "4·B·H·N²·d (H: query heads; 2·B·H·N²·(d + d_v) where v's head dim d_v differs), "
        "halved for causal, for a forward; 2.5× that for a backward alone and 3.5× for a "
        "forward and backward. *vs best* is the best "
        "alternative's time over ours (above 1: ours is faster); *% of ceiling* is the floor "
        "time (the larger of FLOPs at the matrix rate of the dtype and bytes at the copy "
        "bandwidth) over the time. n/a: the implementation declines the dtype, head_dim, "
        "v's head_dim other than q's or grouped kv heads; OOM: out of memory; skip: "
        "predicted over the time limit per call." + interleaving_note(results),
    ])


def interleaving_note(results):
    """The sentence on interleaved timing, for results measured that way."""
    rounds = results.get("settings", {}).get("timing_rounds")
    if not rounds:
        return ""
    return (f" At each point the implementations' timed calls come in {rounds} rounds, each "
            "in a fresh random order, so that none is always timed right after the same other "
            "one: the GPU's clock follows its recent power draw.")


def markdown(results, json_name, plot_names=None):
    plot_names = plot_names or {}
    parts = [preamble(results), "", "## Headline", "", "```", headline(results), "```"]
    for dtype in ("bf16", "f16"):
        t = speed_table(results, "paper", dtype, paper_shape,
                        ["head dim", "mask", "seqlen", "batch×heads"],
                        lambda r: r["tflops"], "TFLOP/s")
        if t:
            parts += ["", f"## FlashAttention-paper grid, {dtype} (TFLOP/s)", "",
                      "batch × seqlen = 16384 tokens, heads × head_dim = 2048."]
            if dtype in plot_names:
                parts += ["", f"![TFLOP/s against seqlen, {dtype}]({plot_names[dtype]})"]
            parts += ["", t]
    t = speed_table(results, "exercise", "f32", exercise_shape,
                    ["(N, d_model, h)", "head dim", "mask"], lambda r: r["ms"], "ms")
    if t:
        parts += ["", "## Exercise shapes, fp32 (ms)", "",
                  "Batch 1, seqlen N, h heads of head_dim d_model / h."]
        if "exercise" in plot_names:
            parts += ["", f"![fp32 exercise shapes]({plot_names['exercise']})"]
        parts += ["", t]
    parts += tflops_section(results, plot_names, "wide", "bf16", "fwd",
                            ["head dim", "mask", "seqlen", "batch×heads (q/kv)"],
                            "Forward at wide head dims", [WIDE_NOTE])
    parts += backward_sections(results, plot_names)
    parts += variants_report.sections(results)
    parts += models_report.sections(results)
    parts += decode_report.sections(results)
    parts += varlen_report.sections(results)
    t = memory_table(results)
    if t:
        parts += ["", "## Peak extra memory of one forward call (MiB)", "",
                  "bf16, batch 1, 16 heads, head_dim 128, not causal: device memory allocated "
                  "during the call beyond the inputs, not counting the output."]
        if "memory" in plot_names:
            parts += ["", f"![peak extra memory against seqlen]({plot_names['memory']})"]
        parts += ["", t]
    if results["rows"]:
        parts += ["", "## Accuracy", "", "Relative L2 error against a float64 reference on "
                  "64 sampled query rows (all heads, batch element 0); on the backward grids "
                  "the largest of dq's at those rows and dk's and dv's at the keys of the "
                  "same indices.", "", accuracy_table(results)]
    hosts = host_table(results)
    if hosts:
        parts += ["", "## Host time per call", "", "Timings above are GPU time: the timed calls "
                  "are queued behind a spin kernel, so the host's time to issue them (Python, "
                  "dispatch, launch) is not counted. This is that host time, measured while "
                  "queueing the warm-up calls.", "", hosts]
    missing = not_run(results)
    if missing:
        parts += ["", "## Not run", "", missing]
    parts += ["", f"Data: `{json_name}`.", ""]
    return "\n".join(parts)


BACKWARD_NOTE = (
    "*backward alone*: dq, dk and dv from dout and the forward's saved results (ours: "
    "flashattn.attention_backward on the forward's out and lse; PyTorch's: autograd.grad "
    "through a graph kept from one forward). *forward + backward*: both through autograd, a "
    "training step's attention. `auto` is flashattn's automatic choice for each. Accuracy: "
    "the largest relative L2 error of dq (sampled rows), dk and dv (sampled keys).")

WIDE_NOTE = (
    "Head dims over 256, bf16, batch × seqlen = 16384 tokens, 8 query heads on 8 kv heads "
    "or on 4 (*8/4*: grouped-query attention, as Gemma 4's; FLOPs count the query heads). "
    "PyTorch's SDPA gets `enable_gqa=True` at the grouped points, where a backend without "
    "it shows n/a; standard attention repeats each kv head over its group. *vs best* is "
    "against the fastest alternative that ran the point, math included.")


def tflops_section(results, plot_names, grid, dtype, pass_, columns, title, notes):
    """One TFLOP/s table of `grid` with its heading, notes and figure; [] if the
    results have no rows for it."""
    t = speed_table(results, grid, dtype, paper_shape, columns, lambda r: r["tflops"],
                    "TFLOP/s", pass_)
    if not t:
        return []
    parts = ["", f"## {title}, {dtype}: {PASS_NAMES[pass_]} (TFLOP/s)", ""] + notes
    name = plot_names.get(f"{grid} {pass_} {dtype}")
    if name:
        parts += ["", f"![TFLOP/s against seqlen, {title.lower()}, {dtype}, {pass_}]({name})"]
    return parts + ["", t]


def backward_sections(results, plot_names):
    """The backward grids' tables: per dtype and pass on the paper grid and at wide head
    dims (TFLOP/s), per pass on the exercise shapes (ms)."""
    parts = []
    for pass_ in ("bwd", "fwd+bwd"):
        for dtype in ("bf16", "f16"):
            parts += tflops_section(results, plot_names, "paper_bwd", dtype, pass_,
                                    ["head dim", "mask", "seqlen", "batch×heads"],
                                    "Backward, FlashAttention-paper grid", [BACKWARD_NOTE])
        t = speed_table(results, "exercise_bwd", "f32", exercise_shape,
                        ["(N, d_model, h)", "head dim", "mask"], lambda r: r["ms"], "ms", pass_)
        if t:
            parts += ["", f"## Backward, exercise shapes, fp32: {PASS_NAMES[pass_]} (ms)", "",
                      BACKWARD_NOTE]
            name = plot_names.get(f"exercise_bwd {pass_}")
            if name:
                parts += ["", f"![fp32 exercise shapes, {pass_}]({name})"]
            parts += ["", t]
    for pass_ in ("bwd", "fwd+bwd"):
        for dtype in ("bf16", "f16"):
            parts += tflops_section(results, plot_names, "wide_bwd", dtype, pass_,
                                    ["head dim", "mask", "seqlen", "batch×heads (q/kv)"],
                                    "Backward at wide head dims",
                                    [WIDE_NOTE, "", BACKWARD_NOTE])
    return parts


# Student's t, 97.5th percentile, by degrees of freedom (two-sided 95%).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228}


def round_range(points):
    """The 95% prediction interval for another run's geometric-mean ratio, from each
    point's per-round (alternative ms, our ms) pairs: the rounds' geometric means taken as
    log-normal, mean ± t·s·√(1 + 1/n). None without several rounds at every point."""
    if not points or len({len(p) for p in points}) != 1 or len(points[0]) < 2:
        return None
    n = len(points[0])
    logs = [math.log(geomean([p[r][0] / p[r][1] for p in points])) for r in range(n)]
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = T_975.get(n - 1, 1.96) * sd * math.sqrt(1 + 1 / n)
    return math.exp(mean - half), math.exp(mean + half)


def headline(results):
    """Per flashattn backend, grid and dtype, against each alternative and the best (the
    fastest alternative at each point): the geometric mean of the speed ratio (their time
    over ours) over the points both ran, with its range; a grid with grouped-query points
    has also a line over those alone ("wide bwd GQA"). In a quick run also each point's
    timings with their spread."""
    ratios = defaultdict(lambda: defaultdict(list))
    per_round = defaultdict(lambda: defaultdict(list))  # [(alt ms, our ms) per round] per point
    for grid in SPEED_GRIDS:
        for key, impl_rows in by_point(results["rows"], grid).items():
            names = [scope(grid, key[7])]
            names += [f"{names[0]} GQA"] if grouped(key) else []
            best = best_alternative(impl_rows)
            for ours in (r for r in impl_rows.values() if r["family"] == FLASHATTN and timed(r)):
                for group in ((ours["impl"], name, key[1]) for name in names):
                    for alt in (r for r in impl_rows.values()
                                if r["family"] != FLASHATTN and timed(r)):
                        ratios[group][alt["impl"]].append(alt["ms"] / ours["ms"])
                        if len(ours.get("round_ms", [])) > 1 and len(alt.get("round_ms", [])) > 1:
                            per_round[group][alt["impl"]].append(
                                list(zip(alt["round_ms"], ours["round_ms"])))
                    if best:
                        ratios[group]["best"].append(best["ms"] / ours["ms"])
    alts = [n for n in impl_order(results, results["rows"]) if family_of(results, n) != FLASHATTN]
    alts += ["best"]
    rounds = results.get("settings", {}).get("rounds", 1)
    width = 40 if rounds > 1 else 26
    label_width = max([24] + [len(f"{o} {g} {d}") + 1 for o, g, d in ratios])
    lines = ["speed ratio = alternative's time / ours (above 1: ours is faster): geometric mean "
             "over the points both ran (min-max); best: the fastest alternative at each point" +
             (f"; rounds: 95% prediction interval for another run's geometric mean, from "
              f"{rounds} rounds, each after the first in a fresh process" if rounds > 1
              else ""),
             f"{'':<{label_width}}" + "".join(f"  {a:>{width}}" for a in alts)]
    for (ours, grid, dtype), by_alt in ratios.items():
        cells = []
        for alt in alts:
            rs = by_alt.get(alt)
            if rs:
                cell = f"{sig(geomean(rs), 2)}× ({sig(min(rs), 2)}-{sig(max(rs), 2)})"
                spread = round_range(per_round[(ours, grid, dtype)].get(alt, []))
                if spread:
                    cell += f" rounds {sig(spread[0], 3)}-{sig(spread[1], 3)}"
                cells.append(cell)
            else:
                cells.append("")
        label = f"{ours} {grid} {dtype}"
        lines.append(f"{label:<{label_width}}" + "".join(f"  {c:>{width}}" for c in cells))
    script = script_ratio_pairs(results)
    if script:
        lines += ["", "decode and varlen, measured once (not in rounds): a / b as named, above "
                  "1: the first-named is faster"]
        lines += [ratio_summary(label, pairs) for label, pairs in script.items()]
    if results.get("mode") == "quick":
        lines += ["", "per point: median ms [min-max of the timed calls]" +
                  (" {each round's median}" if rounds > 1 else "")]
        for grid in SPEED_GRIDS:
            for key, impl_rows in by_point(results["rows"], grid).items():
                first = next(iter(impl_rows.values()))
                lines.append(f"{scope(grid, key[7])} {key[1]} B{key[2]} N{key[3]} "
                             f"H{heads_of(first)} d{head_dims_of(first)} {key[6]}"
                             + (f" {key[9]}" if key[9] else "")
                             + (f" ({key[10]})" if key[10] else ""))
                for r in impl_rows.values():
                    if timed(r):
                        each = ""
                        if len(r.get("round_ms", [])) > 1:
                            each = " {" + ", ".join(sig(m, 4) for m in r["round_ms"]) + "}"
                        lines.append(f"  {r['impl']:<16} {sig(r['ms'], 4):>9} ms "
                                     f"[{sig(r['ms_min'], 4)}-{sig(r['ms_max'], 4)}]{each}")
    return "\n".join(lines)


# ---- history: one line per run -----------------------------------------------------------

HISTORY = "history.jsonl"
# What --history draws unless told otherwise: the ratios the perf notes and README track.
HISTORY_SERIES = ("cuda_mma/flash paper", "cuda_wgmma/cudnn paper N>=1024",
                  "flashattn/best exercise")


def four(x):
    return float(f"{x:.4g}")


def ratio_entry(pairs):
    """[geometric mean, min, max, points, points at or above 1] of alt ms / our ms."""
    rs = [alt / ours for alt, ours in pairs]
    return [four(geomean(rs)), four(min(rs)), four(max(rs)), len(rs), sum(r >= 1 for r in rs)]


def run_ratios(results):
    """The speed ratios of one bench/run file, keyed "OURS/ALT GRID" over all the points
    both ran, "OURS/ALT paper N>=1024" over the paper points from 1024 keys, and "OURS/ALT
    GRID GQA" over a grid's grouped-query points; GRID of a backward grid names its pass:
    "paper bwd", "exercise fwd+bwd", "paper bwd N>=1024", "wide bwd GQA".
    OURS is each flashattn backend, or "flashattn" for the fastest of them at each point;
    ALT is each alternative, or "best" for the fastest. Also each real pair's prediction
    interval from the rounds where every point has several (see round_range)."""
    pairs, rounds = defaultdict(list), defaultdict(list)
    for grid in SPEED_GRIDS:
        for key, impl_rows in by_point(results["rows"], grid).items():
            ours = {n: r for n, r in impl_rows.items() if r["family"] == FLASHATTN and timed(r)}
            alts = {n: r for n, r in impl_rows.items() if r["family"] != FLASHATTN and timed(r)}
            if not ours or not alts:
                continue
            ours[FLASHATTN] = min(ours.values(), key=lambda r: r["ms"])
            alts["best"] = min(alts.values(), key=lambda r: r["ms"])
            name = scope(grid, key[7])
            scopes = [name] + ([f"{name} N>=1024"] if grid.startswith("paper") and key[3] >= 1024
                               else [])
            scopes += [f"{name} GQA"] if grouped(key) else []
            for o_name, o in ours.items():
                for a_name, a in alts.items():
                    real = o_name != FLASHATTN and a_name != "best"
                    for where in scopes:
                        label = f"{o_name}/{a_name} {where}"
                        pairs[label].append((a["ms"], o["ms"]))
                        several = min(len(o.get("round_ms", [])), len(a.get("round_ms", [])))
                        if real and several > 1:
                            rounds[label].append(list(zip(a["round_ms"], o["round_ms"])))
    ratios = {label: ratio_entry(p) for label, p in pairs.items()}
    intervals = {}
    for label, points in rounds.items():
        spread = round_range(points) if len(points) == len(pairs[label]) else None
        if spread:
            intervals[label] = [four(spread[0]), four(spread[1])]
    return ratios, intervals


def script_ratio_pairs(results):
    """The decode and varlen grids' headline ratios as (a, b) pairs (decode_report.py,
    varlen_report.py): "flashattn/best decode", "graph/eager decode", "flashattn/dense
    varlen fwd+bwd", ...; in the history beside run_ratios' entries, in the same form."""
    return {**decode_report.ratio_pairs(results), **varlen_report.ratio_pairs(results)}


def cli_ratios(rows):
    """`flashattn bench` tables (the CLI, and the GPU check's run of it): each backend's
    speed-up over standard attention, "IMPL/standard cli"."""
    pairs = defaultdict(list)
    for r in rows:
        if r.get("speedup_vs_standard"):
            pairs[f"{r['impl']}/standard cli"].append((r["speedup_vs_standard"], 1.0))
    return {label: ratio_entry(p) for label, p in pairs.items()}


def iso_date(date):
    return date[:-1] + "+00:00" if date and date.endswith("Z") else date


def history_line(results, file=None, git=None):
    """One run as one history line: when, what, on what, and its headline ratios (entries
    [geometric mean, min, max, points, points ≥ 1]; see run_ratios). `git`: where the
    run's file can be read again, COMMIT:PATH for `git show`."""
    line = {"date": iso_date(results.get("date")), "commit": results.get("commit"),
            "device": results.get("device")}
    rows = results.get("rows") or results.get("bench_rows") or []
    if "isa" in results:  # bench/cpu_suite.py
        line["kind"] = "cpu grid"
        line["device"] = results.get("cpu")
    elif "bench_rows" in results or "tests" in results:
        line["kind"] = "gpu-check"
    elif (rows and "grid" in rows[0]) or any(
            results.get(key) for key in (decode_report.ROWS, varlen_report.ROWS)):
        line["kind"] = "bench/run"
    else:
        line["kind"] = "flashattn bench"
    if file:
        line["file"] = file
    if git:
        line["git"] = git
    if line["kind"] == "bench/run":
        settings = results.get("settings", {})
        line["mode"] = results.get("mode", "full")
        if results.get("match"):
            line["match"] = results["match"]
        grids = [g for g in ("exercise", "memory", "paper", "wide", "exercise_bwd",
                             "paper_bwd", "wide_bwd", "variants", "models", "models_bwd")
                 if any(r["grid"] == g for r in rows)]
        line["grids"] = {g: len(by_point(rows, g)) for g in grids}
        line["grids"].update({grid: len(results[key]) for grid, key in
                              (("decode", decode_report.ROWS), ("varlen", varlen_report.ROWS))
                              if results.get(key)})
        line["rounds"] = settings.get("rounds", 1)
        line["timing"] = "interleaved" if settings.get("timing_rounds") else "fixed order"
        line["impls"] = impl_order(results, rows)
        c = results.get("ceilings", {})
        line["ceilings"] = {k: four(c[k]) for k in ("bf16_matmul_tflops", "f32_matmul_tflops",
                                                     "copy_tb_per_s") if c.get(k)}
        line["ratios"], intervals = run_ratios(results)
        line["ratios"].update({label: ratio_entry(pairs)
                               for label, pairs in script_ratio_pairs(results).items()})
        if intervals:
            line["rounds_interval"] = intervals
    elif line["kind"] == "cpu grid":
        line["isa"], line["threads"] = results.get("isa"), results.get("threads")
        line["grids"] = {"cpu": len(rows)}
        c = results.get("ceilings", {})
        line["ceilings"] = {k: four(c[k]) for k in ("vector_peak_gflops", "f32_matmul_gflops",
                                                     "copy_gb_per_s") if c.get(k)}
        # PyTorch's fastest CPU SDPA time over ours, per pass; a point with no PyTorch form
        # (softcap) has no ratio.
        pairs = defaultdict(list)
        for r in rows:
            if r.get("ratio"):
                pairs[f"cpu/torch best {r['pass_']}"].append((r["ratio"], 1.0))
            # An A/B run: this build's speed-up over each other build.
            for name, ms in r.get("builds_ms", {}).items():
                pairs[f"cpu/{name} {r['pass_']}"].append((ms / r["ms"], 1.0))
        line["ratios"] = {label: ratio_entry(p) for label, p in pairs.items()}
    else:
        shapes = {tuple(r.get(k) for k in ROW_KEY[2:]) for r in rows}
        line["grids"] = {"cli": len(shapes)}
        line["rounds"] = 1
        line["impls"] = sorted({r["impl"] for r in rows})
        line["ratios"] = cli_ratios(rows)
        if line["kind"] == "gpu-check":
            tests = [results.get("tests") or {}, results.get("python_tests") or {}]
            line["tests"] = {"passed": sum(t.get("passed", 0) for t in tests),
                             "failed": sum(t.get("failed", 0) for t in tests)}
            line["sanitizer_errors"] = sum((results.get("sanitizer_errors") or {}).values())
    return line


def free_stem(folder, stem):
    """`stem`, or the first of stem-2, stem-3, ... whose .json is not in `folder` yet: a
    second run of a day (or of a commit) into one folder keeps the first one's files."""
    candidate, n = stem, 1
    while (Path(folder) / f"{candidate}.json").exists():
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def append_history(results, file, path):
    """Adds `results` to the history file at `path` (bench/run calls this after a run)."""
    with open(path, "a") as f:
        f.write(json.dumps(history_line(results, file)) + "\n")


def read_history(path):
    return [json.loads(text) for text in Path(path).read_text().splitlines() if text.strip()]


def history_from_git(folder):
    """A history line for every version of every JSON file that git has recorded in
    `folder`, oldest run first: the history of a folder whose old files were deleted."""
    log = subprocess.run(["git", "log", "--reverse", "--diff-filter=AM", "--format=%x00%h",
                          "--name-only", "--", "."], cwd=folder, capture_output=True,
                         text=True, check=True).stdout
    lines = []
    for entry in log.split("\0")[1:]:
        commit, *paths = entry.split()
        for path in (p for p in paths if p.endswith(".json")):
            text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=folder,
                                  capture_output=True, text=True, check=True).stdout
            try:
                results = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(results, dict):
                lines.append(history_line(results, Path(path).name, f"{commit}:{path}"))
    return sorted(lines, key=lambda line: line["date"] or "")


def history_series(lines, keys=HISTORY_SERIES):
    """What the history plot draws: for each series key, its entry in every bench/run line
    that covers the whole grid (as many points as the widest run with that key: A/B runs
    and runs of a few points are left out). Returns the runs drawn, oldest first, and per key
    a list of (run index, entry, interleaved timing)."""
    runs = [line for line in lines if line.get("kind") == "bench/run"]
    widest = {k: max((line["ratios"][k][3] for line in runs if k in line["ratios"]), default=0)
              for k in keys}
    drawn = [line for line in runs
             if any(line["ratios"].get(k, [0] * 4)[3] == widest[k] > 0 for k in keys)]
    series = {k: [(i, line["ratios"][k], line.get("timing") == "interleaved")
                  for i, line in enumerate(drawn)
                  if line["ratios"].get(k, [0] * 4)[3] == widest[k] > 0]
              for k in keys}
    return drawn, series


def history_text(drawn, series):
    """The plot's data as a table: geometric means (min-max) by run."""
    keys = list(series)
    width = max([len(k) for k in keys] + [18])
    lines = [f"{'run':<34}" + "".join(f"  {k:>{width}}" for k in keys)]
    by_run = {k: {i: entry for i, entry, _ in points} for k, points in series.items()}
    for i, line in enumerate(drawn):
        cells = []
        for k in keys:
            e = by_run[k].get(i)
            cells.append(f"{sig(e[0], 4)}× ({sig(e[1], 3)}-{sig(e[2], 3)})" if e else "")
        label = f"{(line['date'] or '')[:16]} {run_label(line)}"
        lines.append(f"{label:<34}" + "".join(f"  {c:>{width}}" for c in cells))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="?", help="a JSON file written by bench/run")
    p.add_argument("--no-plots", action="store_true", help="write the Markdown only")
    p.add_argument("--history", type=Path, metavar="HISTORY.jsonl",
                   help="print the headline ratios over the runs of this history file and "
                        "plot them (HISTORY.png beside it, or --plot-out)")
    p.add_argument("--series", action="append", metavar="KEY",
                   help="a ratio key of the history lines to draw, e.g. 'cuda_mma/flash "
                        f"paper' (repeatable; default: {', '.join(HISTORY_SERIES)})")
    p.add_argument("--plot-out", type=Path, help="where --history writes its PNG")
    p.add_argument("--rebuild-history", type=Path, metavar="HISTORY.jsonl",
                   help="rewrite this history file from every version of every results JSON "
                        "that git has recorded in its folder")
    args = p.parse_args()
    if args.rebuild_history:
        lines = history_from_git(args.rebuild_history.resolve().parent)
        args.rebuild_history.write_text("".join(json.dumps(line) + "\n" for line in lines))
        print(f"wrote {args.rebuild_history}: {len(lines)} runs")
    if args.history:
        drawn, series = history_series(read_history(args.history),
                                       tuple(args.series or HISTORY_SERIES))
        print(history_text(drawn, series))
        out = args.plot_out or args.history.with_suffix(".png")
        try:
            import plots
        except ImportError as e:
            print(f"no plot ({e})")
        else:
            plots.history_figure(drawn, series, out)
            print(f"wrote {out}")
    if args.results:
        write_report(args.results, args.no_plots)
    elif not (args.history or args.rebuild_history):
        p.error("give a results JSON, --history or --rebuild-history")


def write_report(json_path, no_plots=False):
    results = json.loads(json_path.read_text())
    plot_names = {}
    if not no_plots:
        try:
            import plots
        except ImportError as e:
            print(f"no plots ({e}): the Markdown only")
        else:
            plot_names = plots.write_all(results, json_path.with_suffix(""))
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(results, json_path.name, plot_names))
    print(f"wrote {md_path}" + "".join(f", {name}" for name in plot_names.values()))


if __name__ == "__main__":
    main()
