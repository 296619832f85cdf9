#!/usr/bin/env python3
"""Tables and plots from one bench/run JSON: `bench/report.py RESULTS.json [--no-plots]`.

Writes RESULTS.md beside the JSON (the tables, each flashattn backend's speed ratio against
the best alternative at every point, accuracy, what did not run) and, with matplotlib,
RESULTS-paper-<dtype>.png, RESULTS-exercise.png and RESULTS-memory.png. Needs no GPU.
"""
import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

FLASHATTN = "flashattn"
MIB = 2**20


# ---- reading rows -------------------------------------------------------------------------

def point_key(row):
    return (row["grid"], row["dtype"], row["batch"], row["seqlen_q"], row["heads_q"],
            row["head_dim"], row["causal"])


def by_point(rows, grid):
    """{point key: {impl: row}} for one grid, in the order the run measured the points."""
    points = defaultdict(dict)
    for row in rows:
        if row["grid"] == grid:
            points[point_key(row)][row["impl"]] = row
    return points


ROW_KEY = ("impl", "grid", "dtype", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
           "head_dim", "causal")


def merge_rounds(rows):
    """One row per point and implementation from rounds of the same grid: the round whose
    median time is the median of the rounds' (its spread and accuracy with it), and
    "round_ms", every round's median in order. A point with one round keeps its row."""
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in ROW_KEY), []).append(row)
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


def timed(row):
    return row is not None and row["status"] == "ok" and row["ms"] is not None


def best_alternative(impl_rows):
    """The fastest measured non-flashattn row at one point, or None."""
    alternatives = [r for r in impl_rows.values() if r["family"] != FLASHATTN and timed(r)]
    return min(alternatives, key=lambda r: r["ms"], default=None)


def impl_order(results, rows):
    """flashattn backends first, then the alternatives, as the run listed them."""
    present = {r["impl"] for r in rows}
    names = [n for n in results.get("impls", {}) if n in present]
    names += sorted(present - set(names))
    return ([n for n in names if family_of(results, n) == FLASHATTN] +
            [n for n in names if family_of(results, n) != FLASHATTN])


def family_of(results, impl):
    return results.get("impls", {}).get(impl, FLASHATTN if impl.startswith("cuda_") else "")


# ---- formatting ---------------------------------------------------------------------------

def sig(x, digits=3):
    """x to `digits` significant digits, with an exponent only below 0.001."""
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def status_mark(row):
    if row is None:
        return ""
    return {"unsupported": "n/a", "oom": "OOM", "skipped": "skip", "error": "error"}.get(
        row["status"], "")


def cell(row, value):
    return sig(value(row)) if timed(row) else status_mark(row)


def ratio(best, row):
    return f"{sig(best['ms'] / row['ms'], 2)}×" if best and timed(row) else ""


def table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


# ---- sections -----------------------------------------------------------------------------

def speed_table(results, grid, dtype, shape_cells, shape_header, value, unit):
    """One row per point: each implementation's `value`, the best alternative, and each
    flashattn backend's speed ratio to it (its time over ours: above 1 means ours is
    faster) and its fraction of the ceiling."""
    rows = [r for r in results["rows"] if r["grid"] == grid and r["dtype"] == dtype]
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
            str(row["seqlen_q"]), f"{row['batch']}×{row['heads_q']}"]


def exercise_shape(row):
    n, d_model, h = row.get("exercise") or (row["seqlen_q"], row["heads_q"] * row["head_dim"],
                                            row["heads_q"])
    return [f"({n}, {d_model}, {h})", str(row["head_dim"]),
            "causal" if row["causal"] != "none" else ""]


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
    """Worst and median relative L2 error of each implementation per grid and dtype."""
    errors = defaultdict(list)
    for r in results["rows"]:
        if r["status"] == "ok":
            errors[(r["impl"], r["grid"], r["dtype"])].append(r["rel_l2_err"])
    body = []
    for impl in impl_order(results, results["rows"]):
        for (name, grid, dtype), errs in sorted(errors.items()):
            if name != impl:
                continue
            finite = sorted(e for e in errs if e is not None)
            bad = len(errs) - len(finite)
            worst = f"{finite[-1]:.1e}" if finite else ""
            median = f"{finite[len(finite) // 2]:.1e}" if finite else ""
            body.append([impl, grid, dtype, str(len(errs)), median, worst, str(bad) if bad else ""])
    return table(["impl", "grid", "dtype", "points", "median rel L2 err", "worst", "NaN/inf"], body)


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

def preamble(results):
    c, env = results["ceilings"], results.get("environment", {})
    return "\n".join([
        f"# Attention forward: {results['device']}",
        "",
        f"Commit `{results['commit']}`, {results['date']}, {results.get('mode', 'full')} run; "
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
        "4·B·H·N²·d, halved for causal. *vs best* is the best alternative's time over ours "
        "(above 1: ours is faster); *% of ceiling* is the floor time (the larger of FLOPs at "
        "the matrix rate of the dtype and bytes at the copy bandwidth) over the time. "
        "n/a: the implementation declines the dtype or head_dim; OOM: out of memory; skip: "
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
    t = memory_table(results)
    if t:
        parts += ["", "## Peak extra memory of one forward call (MiB)", "",
                  "bf16, batch 1, 16 heads, head_dim 128, not causal: device memory allocated "
                  "during the call beyond the inputs, not counting the output."]
        if "memory" in plot_names:
            parts += ["", f"![peak extra memory against seqlen]({plot_names['memory']})"]
        parts += ["", t]
    parts += ["", "## Accuracy", "", "Relative L2 error against a float64 reference on 64 "
              "sampled query rows (all heads, batch element 0).", "", accuracy_table(results)]
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


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


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
    """Per flashattn backend, grid and dtype, against each alternative: the geometric mean
    of the speed ratio (their time over ours) over the points both ran, with its range; in
    a quick run also each point's timings with their spread."""
    ratios = defaultdict(lambda: defaultdict(list))
    per_round = defaultdict(lambda: defaultdict(list))  # [(alt ms, our ms) per round] per point
    for grid in ("paper", "exercise"):
        for key, impl_rows in by_point(results["rows"], grid).items():
            for ours in (r for r in impl_rows.values() if r["family"] == FLASHATTN and timed(r)):
                for alt in (r for r in impl_rows.values() if r["family"] != FLASHATTN and timed(r)):
                    group = (ours["impl"], grid, key[1])
                    ratios[group][alt["impl"]].append(alt["ms"] / ours["ms"])
                    if len(ours.get("round_ms", [])) > 1 and len(alt.get("round_ms", [])) > 1:
                        per_round[group][alt["impl"]].append(
                            list(zip(alt["round_ms"], ours["round_ms"])))
    alts = [n for n in impl_order(results, results["rows"]) if family_of(results, n) != FLASHATTN]
    rounds = results.get("settings", {}).get("rounds", 1)
    width = 40 if rounds > 1 else 26
    lines = ["speed ratio = alternative's time / ours (above 1: ours is faster): geometric mean "
             "over the points both ran (min-max)" +
             (f"; rounds: 95% prediction interval for another run's geometric mean, from "
              f"{rounds} rounds, each after the first in a fresh process" if rounds > 1
              else ""),
             f"{'':<24}" + "".join(f"  {a:>{width}}" for a in alts)]
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
        lines.append(f"{label:<24}" + "".join(f"  {c:>{width}}" for c in cells))
    if results.get("mode") == "quick":
        lines += ["", "per point: median ms [min-max of the timed calls]" +
                  (" {each round's median}" if rounds > 1 else "")]
        for grid in ("paper", "exercise"):
            for key, impl_rows in by_point(results["rows"], grid).items():
                lines.append(f"{grid} {key[1]} B{key[2]} N{key[3]} H{key[4]} d{key[5]} {key[6]}")
                for r in impl_rows.values():
                    if timed(r):
                        each = ""
                        if len(r.get("round_ms", [])) > 1:
                            each = " {" + ", ".join(sig(m, 4) for m in r["round_ms"]) + "}"
                        lines.append(f"  {r['impl']:<16} {sig(r['ms'], 4):>9} ms "
                                     f"[{sig(r['ms_min'], 4)}-{sig(r['ms_max'], 4)}]{each}")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a JSON file written by bench/run")
    p.add_argument("--no-plots", action="store_true", help="write the Markdown only")
    args = p.parse_args()
    results = json.loads(args.results.read_text())
    plot_names = {}
    if not args.no_plots:
        import plots
        plot_names = plots.write_all(results, args.results.with_suffix(""))
    md_path = args.results.with_suffix(".md")
    md_path.write_text(markdown(results, args.results.name, plot_names))
    print(f"wrote {md_path}" + "".join(f", {name}" for name in plot_names.values()))


if __name__ == "__main__":
    main()
